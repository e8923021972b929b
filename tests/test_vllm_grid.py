"""The timing-grid planner, the LinearCost fit from synthetic grid timings, the calibration
file, and the sim-vs-measured comparison (no GPU)."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import polars as pl
import pytest
from rolloutlab.calibration.fits.vllm_grid import fit_grid, grid_calibration
from rolloutlab.calibration.validation.vllm_compare import (
    sim_vs_measured,
    step_lengths,
    summary_markdown,
)
from rolloutlab.real.engines.timing_grid import EngineLimits, GridSpec, plan_grid
from rolloutlab.sim.engine.core import EngineConfig, generate
from rolloutlab.sim.models.cost import LinearCost
from rolloutlab.sim.models.cost_grid import CellTiming, GridCell
from rolloutlab.sim.scenario.scenario import load_scenario, scenario_from_dict

from tests.reference.engine_loop import reference_generate

LIMITS = EngineLimits(
    max_num_seqs=64, max_model_len=1024, kv_cache_tokens=40_000, max_num_batched_tokens=16_384
)
TRUE = LinearCost(a_s=4e-3, b_s=2e-5, c_s=3e-8, prefill_s_per_token=6e-6)


def test_planner_keeps_cells_that_fit_and_says_why_others_do_not():
    spec = GridSpec(running_seqs=(1, 8, 64, 128), prompt_tokens=(64, 512, 2048), response_tokens=32)
    kept, dropped = plan_grid(spec, LIMITS)
    assert [(c.running_seqs, c.prompt_tokens) for c in kept] == [
        (1, 64),
        (1, 512),
        (8, 64),
        (8, 512),
        (64, 64),
    ]
    reasons = {(c.running_seqs, c.prompt_tokens): why for c, why in dropped}
    assert "max_num_seqs" in reasons[(128, 64)]
    assert "max_model_len" in reasons[(1, 2048)]
    assert "max_num_batched_tokens" in reasons[(64, 512)]


def test_planner_respects_kv_headroom_and_batched_tokens():
    tight = EngineLimits(
        max_num_seqs=64, max_model_len=1024, kv_cache_tokens=10_000, max_num_batched_tokens=4096
    )
    kept, dropped = plan_grid(
        GridSpec(running_seqs=(1, 8, 32), prompt_tokens=(64, 256), response_tokens=32), tight
    )
    for c in kept:
        assert c.running_seqs * (c.prompt_tokens + 32) <= 0.9 * 10_000 and c.prefill_tokens <= 4096
    assert any("max_num_batched_tokens" in why or "KV" in why for _, why in dropped)


def test_planner_refuses_a_grid_that_cannot_identify_the_fit():
    with pytest.raises(ValueError, match="need >= 4"):
        plan_grid(GridSpec(running_seqs=(1, 8), prompt_tokens=(64,), response_tokens=32), LIMITS)


def _synthetic(cost: LinearCost, cells, noise=0.0, seed=0) -> list[CellTiming]:
    """Timings the sim's own per-iteration engine would measure for each cell."""
    rng = np.random.default_rng(seed)
    out = []
    for c in cells:
        n, P, L = c.running_seqs, c.prompt_tokens, c.response_tokens
        times, _ = reference_generate(
            np.full((n, 1), L),
            np.full(n, P),
            cost,
            EngineConfig(n_workers=1, max_num_seqs=n, prefix_caching=False),
        )
        decode = float(np.median((times["t_finish"] - times["t_first_token"]) / (L - 1)))
        prefill = float(times["t_first_token"].max())
        jitter = rng.normal(1.0, noise, 2) if noise else (1.0, 1.0)
        out.append(
            CellTiming(
                c,
                decode * jitter[0],
                prefill * jitter[1],
                call_s=prefill + decode * (L - 1) + 0.02,
                span_s=prefill + decode * (L - 1),
            )
        )
    return out


def test_fit_recovers_the_cost_the_sim_engine_ran_with():
    cells = [GridCell(n, P, 48) for n in (1, 8, 32, 128) for P in (64, 512, 2048)]
    fit = fit_grid(_synthetic(TRUE, cells))
    assert fit.a_s == pytest.approx(TRUE.a_s, rel=1e-3)
    assert fit.b_s == pytest.approx(TRUE.b_s, rel=1e-3)
    assert fit.c_s == pytest.approx(TRUE.c_s, rel=1e-3)
    assert fit.prefill_s_per_token == pytest.approx(TRUE.prefill_s_per_token, rel=1e-3)
    assert fit.gen_overhead_s == pytest.approx(0.02, abs=1e-9)
    assert fit.decode_mape < 1e-6 and fit.prefill_mape < 1e-6 and len(fit.cells) == 12


def test_fit_with_noise_stays_close_and_non_negative():
    cells = [GridCell(n, P, 48) for n in (1, 8, 32, 128) for P in (64, 512, 2048)]
    fit = fit_grid(_synthetic(TRUE, cells, noise=0.02))
    assert min(fit.a_s, fit.b_s, fit.c_s, fit.prefill_s_per_token) >= 0
    assert fit.a_s == pytest.approx(TRUE.a_s, rel=0.1) and fit.decode_mape < 0.05


def test_fit_rejects_too_few_or_bad_cells():
    cells = [GridCell(n, P, 48) for n in (1, 8) for P in (64, 512)]
    good = _synthetic(TRUE, cells)
    with pytest.raises(ValueError, match=">= 4"):
        fit_grid(good[:3])
    bad = good[:3] + [CellTiming(cells[3], 0.0, 0.01)]
    with pytest.raises(ValueError, match="positive"):
        fit_grid(bad)


def test_grid_calibration_loads_in_the_simulator():
    cells = [GridCell(n, P, 48) for n in (1, 8, 32) for P in (64, 512)]
    fit = fit_grid(_synthetic(TRUE, cells))
    base = load_scenario("gsm8k").source
    resolved = {
        "vllm_version": "0.24.0",
        "num_gpu_blocks": 1000,
        "block_size": 16,
        "max_num_seqs": 32,
    }
    d = grid_calibration(
        fit,
        resolved,
        asdict(GridSpec(running_seqs=(1, 8, 32), prompt_tokens=(64, 512))),
        base,
        "grid-test",
        {"model_config": {"path": "x", "sha256": "0"}},
    )
    sc = scenario_from_dict(json.loads(json.dumps(d)))
    assert sc.cost.a_s == pytest.approx(TRUE.a_s, rel=1e-3) and sc.engine.max_num_seqs == 32
    assert d["provenance"]["engine"]["num_gpu_blocks"] == 1000 and d["fit"]["n_cells"] == 6


def _trace(cost: LinearCost, engine: EngineConfig, steps=3, B=3, G=4, stretch=1.0) -> pl.DataFrame:
    rng = np.random.default_rng(1)
    rows = []
    t0 = 0.0
    for s in range(steps):
        L = rng.integers(5, 60, (B, G))
        P = rng.integers(10, 30, B)
        batch = generate(L, P, cost, engine)
        for i in range(B * G):
            rows.append(
                {
                    "run_id": "r",
                    "step": s,
                    "prompt_id": s * B + i // G,
                    "sample_idx": i % G,
                    "group_size": G,
                    "policy_version": s,
                    "learner_version": s,
                    "prompt_tokens": int(P[i // G]),
                    "response_tokens": int(L.ravel()[i]),
                    "finish_reason": "stop",
                    "worker": 0,
                    "t_submit": t0,
                    "t_first_token": t0 + stretch * float(batch.t_first_token[i]),
                    "t_finish": t0 + stretch * float(batch.t_finish[i]),
                }
            )
        t0 += 10.0
    return pl.DataFrame(rows)


def test_sim_vs_measured_is_exact_on_a_trace_the_sim_made():
    eng = EngineConfig(n_workers=1, max_num_seqs=8)
    table = sim_vs_measured(_trace(TRUE, eng), TRUE, eng)
    assert table.height == 3 and table["rel_err"].abs().max() < 1e-9
    slower = sim_vs_measured(_trace(TRUE, eng, stretch=1.25), TRUE, eng)
    assert slower["rel_err"].to_numpy() == pytest.approx(np.full(3, 1 / 1.25 - 1))
    md = summary_markdown(slower, "t")
    assert "| r | 3 |" in md and md.count("\n| r | ") == 4


def test_step_lengths_refuses_ragged_groups():
    df = _trace(TRUE, EngineConfig(max_num_seqs=8), steps=1).filter(
        ~((pl.col("prompt_id") == 0) & (pl.col("sample_idx") == 3))
    )
    with pytest.raises(ValueError, match="different sizes"):
        step_lengths(df)


def test_cli_vllm_compare_writes_the_table(tmp_path):
    from click.testing import CliRunner
    from rolloutlab.sim.trace.schema import write_parquet

    from rolloutlab.cli import main

    eng = EngineConfig(n_workers=1, max_num_seqs=8)
    run = tmp_path / "run"
    run.mkdir()
    write_parquet(_trace(TRUE, eng), run / "rollouts.parquet", "rollouts")
    base = load_scenario("gsm8k").source
    calib = {**base, "cost": TRUE.to_dict(), "engine": {"n_workers": 1, "max_num_seqs": 8}}
    (tmp_path / "c.json").write_text(json.dumps(calib))
    res = CliRunner().invoke(
        main,
        [
            "calibrate",
            "vllm-compare",
            str(run),
            "--calibration",
            str(tmp_path / "c.json"),
            "--out",
            str(tmp_path / "cmp"),
        ],
    )
    assert res.exit_code == 0, res.output
    table = pl.read_csv(tmp_path / "cmp" / "sim_vs_measured.csv")
    assert table.height == 3 and table["rel_err"].abs().max() < 1e-6
