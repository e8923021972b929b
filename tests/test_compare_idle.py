"""compare idle: the cost fit against the engine, recovery on synthetic traces, bad input, CLI."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.analysis.idle.compare import IdleCompareConfig, add_naive_rules, compare_idle
from rolloutlab.analysis.idle.finish_fit import finish_features, fit_finish_times
from rolloutlab.analysis.inputs.run_input import RunInputError, load_run, step_layouts
from rolloutlab.calibration.fits.prompt_lengths import fit_prompt_lognormal
from rolloutlab.sim.engine.core import EngineConfig, generate
from rolloutlab.sim.models.cost import LinearCost

from rolloutlab.cli import main
from tests.compare_helpers import COST, LENGTHS, write_run


@settings(max_examples=25, deadline=None)
@given(
    n_prompts=st.integers(1, 5),
    G=st.integers(1, 6),
    slots=st.integers(1, 12),
    seed=st.integers(0, 10_000),
    coef=st.tuples(*[st.floats(0, 1e-2)] * 4),
)
def test_finish_features_times_coefficients_are_the_engine_finish_times(
    n_prompts, G, slots, seed, coef
):
    rng = np.random.default_rng(seed)
    L = rng.integers(1, 30, size=(n_prompts, G))
    P = rng.integers(1, 20, size=n_prompts)
    engine = EngineConfig(n_workers=1, max_num_seqs=slots, prefix_caching=False)
    cost = LinearCost(*coef)
    batch = generate(L, P, cost, engine)
    np.testing.assert_allclose(
        finish_features(L, P, engine) @ np.array(coef), batch.t_finish, rtol=1e-9, atol=1e-12
    )


def test_the_fit_recovers_the_cost_that_timed_a_synthetic_run(tmp_path):
    run = load_run(write_run(tmp_path, [4, 16, 8, 16, 4, 12]))
    fit = fit_finish_times(step_layouts(run), run.engine)
    assert fit.rel_rmse < 1e-6 and fit.dropped_steps == ()
    assert fit.cost.a_s == pytest.approx(COST.a_s, rel=1e-3)


def test_a_step_slowed_by_another_process_is_left_out_of_the_fit(tmp_path):
    run = load_run(write_run(tmp_path, [8] * 6, slow={2: 2.0}))
    fit = fit_finish_times(step_layouts(run), run.engine)
    assert fit.dropped_steps == (2,)
    assert fit.cost.a_s == pytest.approx(COST.a_s, rel=1e-3)
    untrimmed = fit_finish_times(step_layouts(run), run.engine, trim=None)
    assert untrimmed.rel_rmse > 0.05


def test_replay_of_a_noise_free_run_is_exact_and_drawn_beats_nothing_worse_than_30_percent(
    tmp_path,
):
    run = load_run(write_run(tmp_path, [4, 16] * 10, prompts=6))
    res = compare_idle(run, IdleCompareConfig(fit_steps=10, draws=8))
    s = {(r["prediction"], r["scope"]): r for r in res.summary.to_dicts()}
    assert s[("replay", "all")]["makespan_mdape"] < 1e-6
    assert s[("replay", "all")]["straggler_agreement"] == 1.0
    assert s[("drawn", "all")]["makespan_mdape"] < 0.3
    assert {"G=4", "G=16"} <= {scope for _, scope in s}
    held = res.per_step.filter(pl.col("split") == "held_out")
    assert held["step"].to_list() == list(range(10, 20))


def test_persistence_predicts_each_step_by_the_measured_step_before_it(tmp_path):
    run = load_run(write_run(tmp_path, [4, 16, 8, 16, 4, 12], slow={4: 1.5}))
    res = compare_idle(run, IdleCompareConfig(fit_steps=3, draws=2))
    ps = res.per_step.sort("step")
    meas = ps["measured_makespan_s"].to_list()
    assert ps["persistence_makespan_s"].to_list() == [None] + meas[:-1]
    held = ps.filter(pl.col("split") == "held_out")
    rel = np.abs(
        held["persistence_makespan_s"].to_numpy() / held["measured_makespan_s"].to_numpy() - 1
    )
    row = res.summary.filter(
        (pl.col("prediction") == "persistence") & (pl.col("scope") == "all")
    ).row(0, named=True)
    assert row["held_out_steps"] == 3
    assert row["makespan_mdape"] == pytest.approx(float(np.median(rel)))


def test_linear_rule_extends_each_group_sizes_line_through_its_fit_steps(tmp_path):
    run = load_run(write_run(tmp_path, [8, 16, 8, 16, 8, 16], slow={2: 1.5}))
    res = compare_idle(run, IdleCompareConfig(fit_steps=4, draws=2))
    ps = res.per_step.sort("step")
    m = ps["measured_makespan_s"].to_list()
    idle = ps["measured_idle_frac"].to_list()
    # G 8 fits steps 0 and 2, G 16 steps 1 and 3: the line through two points
    want = [m[0] + (m[2] - m[0]) / 2 * 4, m[1] + (m[3] - m[1]) / 2 * 4]
    np.testing.assert_allclose(ps["linear_makespan_s"].to_list()[4:], want, rtol=1e-9)
    np.testing.assert_allclose(
        ps["linear_idle_frac"][4], idle[0] + (idle[2] - idle[0]) / 2 * 4, rtol=1e-9
    )
    row = res.summary.filter((pl.col("prediction") == "linear") & (pl.col("scope") == "all")).row(
        0, named=True
    )
    rel = np.abs(np.array(want) / np.array(m[4:]) - 1)
    assert row["makespan_mdape"] == pytest.approx(float(np.median(rel)))


def test_linear_rule_pools_the_fit_steps_when_a_group_size_has_one(tmp_path):
    run = load_run(write_run(tmp_path, [4, 16, 8, 16, 4, 12], slow={1: 1.5}))
    res = compare_idle(run, IdleCompareConfig(fit_steps=3, draws=2))
    ps = res.per_step.sort("step")
    m = ps["measured_makespan_s"].to_list()
    # steps 0, 1, 2 (one each of G 4, 16, 8): slope (m2 - m0) / 2 through their mean at 1
    line = [sum(m[:3]) / 3 + (m[2] - m[0]) / 2 * (t - 1) for t in (3, 4, 5)]
    np.testing.assert_allclose(ps["linear_makespan_s"].to_list()[3:], line, rtol=1e-9)


def test_naive_rules_recomputed_from_a_written_comparison_are_the_same(tmp_path):
    run = load_run(write_run(tmp_path, [4, 16, 8, 16, 4, 12], slow={1: 1.5}))
    res = compare_idle(run, IdleCompareConfig(fit_steps=3, draws=2))
    path = tmp_path / "cmp"
    path.mkdir()
    # an output written before the persistence and linear rules existed
    old = res.per_step.drop([c for c in res.per_step.columns if c.startswith(("pers", "lin"))])
    old.write_csv(path / "idle_comparison.csv")
    again = add_naive_rules(pl.read_csv(path / "idle_comparison.csv"))
    for col in ("constant_makespan_s", "persistence_makespan_s", "linear_makespan_s"):
        np.testing.assert_allclose(
            again[col].to_numpy().astype(float), res.per_step[col].to_numpy().astype(float)
        )
    bench = _idle_bench()
    s = bench.scores(path)
    want = res.summary.filter(pl.col("scope") == "all")
    for r in want.to_dicts():
        assert s[r["prediction"]] == pytest.approx(r["makespan_mdape"])
    assert bench.row("x", s).endswith(("| yes |", "| **no** |"))


def _idle_bench():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "idle_baselines.py"
    spec = importlib.util.spec_from_file_location("idle_baselines", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_prompt_lognormal_fit_recovers_its_parameters():
    rng = np.random.default_rng(1)
    P = rng.integers(4, 16, size=3000)
    groups = list(LENGTHS.sample_for_prompts(rng, P, 8).astype(float))
    fit = fit_prompt_lognormal(groups, P, 72)
    assert fit.beta == pytest.approx(LENGTHS.beta, abs=0.08)
    assert fit.sigma_within == pytest.approx(LENGTHS.sigma_within, rel=0.1)
    assert fit.sigma_prompt == pytest.approx(LENGTHS.sigma_prompt, abs=0.04)


def test_cli_writes_the_comparison_table_figures_and_a_report(tmp_path):
    run_dir = write_run(tmp_path / "run", [4, 8] * 5)
    out = tmp_path / "cmp"
    res = CliRunner().invoke(
        main,
        [
            "compare",
            "idle",
            "--real",
            str(run_dir),
            "--fit-steps",
            "4",
            "--draws",
            "2",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    df = pl.read_csv(out / "idle_comparison.csv")
    for col in (
        "step",
        "predicted_makespan_s",
        "measured_makespan_s",
        "predicted_idle_frac",
        "measured_idle_frac",
        "predicted_straggler",
        "measured_straggler",
        "replay_makespan_s",
    ):
        assert col in df.columns
    assert json.loads((out / "idle_summary.json").read_text())["fit_steps"] == 4
    rep = CliRunner().invoke(main, ["report", str(out), "--out", str(tmp_path / "html")])
    assert rep.exit_code == 0, rep.output
    page = (tmp_path / "html" / "cmp.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and "makespan to a median" in page


def test_traces_of_another_schema_version_are_refused_naming_the_file(tmp_path):
    run_dir = write_run(tmp_path, [4] * 4)
    table = pq.read_table(run_dir / "steps.parquet")
    meta = dict(table.schema.metadata)
    meta[b"rolloutlab.schema_version"] = b"99"
    pq.write_table(table.replace_schema_metadata(meta), run_dir / "steps.parquet")
    res = CliRunner().invoke(
        main, ["compare", "idle", "--real", str(run_dir), "--out", str(tmp_path / "o")]
    )
    assert res.exit_code != 0
    assert "steps.parquet" in res.output and "schema version 99" in res.output


def test_a_run_directory_without_steps_is_refused(tmp_path):
    run_dir = write_run(tmp_path, [4] * 4)
    (run_dir / "steps.parquet").unlink()
    with pytest.raises(RunInputError, match="no steps.parquet or steps.jsonl"):
        load_run(run_dir)
    res = CliRunner().invoke(
        main, ["compare", "idle", "--real", str(tmp_path / "nothing"), "--out", str(tmp_path / "o")]
    )
    assert res.exit_code != 0 and "not a directory" in res.output


def test_too_few_steps_to_hold_one_out_is_refused(tmp_path):
    run = load_run(write_run(tmp_path, [4] * 3))
    with pytest.raises(ValueError, match="at least one step is held out"):
        compare_idle(run, IdleCompareConfig(fit_steps=3))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(5, 40), st.lists(st.integers(1, 200), min_size=1, max_size=6)),
        min_size=1,
        max_size=8,
    ),
    st.lists(st.integers(1, 60), min_size=1, max_size=5),
    st.integers(1, 6),
    st.integers(0, 99),
)
def test_empirical_lengths_resample_groups_of_the_nearest_prompt_length(obs, want, G, seed):
    from rolloutlab.calibration.fits.prompt_lengths import fit_prompt_empirical

    prompts = np.array([p for p, _ in obs])
    model = fit_prompt_empirical([np.array(g) for _, g in obs], prompts, max_response_length=150)
    L = model.sample_for_prompts(np.random.default_rng(seed), np.array(want), G)
    assert L.shape == (len(want), G) and L.min() >= 1 and L.max() <= 150
    for row, p in zip(L, want):
        gap = np.abs(prompts - p)
        allowed = {min(v, 150) for (q, g), d in zip(obs, gap) if d == gap.min() for v in g}
        assert set(row.tolist()) <= allowed


def _shifted_submits(run_dir, shift_s):
    """The run's rollouts with each request's t_submit moved ``shift_s * row`` later
    (queued one by one, as vLLM does)."""
    rollouts = pl.read_parquet(run_dir / "rollouts.parquet")
    shift = pl.int_range(pl.len()).over("step").cast(pl.Float64) * shift_s
    return rollouts.with_columns(pl.col("t_submit") + shift)


def test_requests_queued_one_by_one_before_the_first_token_are_one_submit(tmp_path):
    run = load_run(write_run(tmp_path, [4] * 4))
    want = step_layouts(run)
    first = run.rollouts.group_by("step").agg(
        (pl.col("t_first_token").min() - pl.col("t_submit").min()).alias("gap")
    )
    shift = float(first["gap"].min()) / (run.rollouts.filter(pl.col("step") == 0).height * 2)
    assert shift > 0
    moved = dataclasses.replace(run, rollouts=_shifted_submits(run.path, shift))
    got = step_layouts(moved)
    for a, b in zip(want, got):  # finish times from the step's first submit, as the makespan
        np.testing.assert_array_equal(a.finish_s, b.finish_s)


def test_a_request_submitted_after_the_first_token_is_not_a_synchronous_step(tmp_path):
    run = load_run(write_run(tmp_path, [4] * 4))
    late = run.rollouts.with_columns(
        pl.when(pl.int_range(pl.len()).over("step") == 1)
        .then(pl.col("t_first_token").min().over("step") + 1e-3)
        .otherwise(pl.col("t_submit"))
        .alias("t_submit")
    )
    with pytest.raises(RunInputError, match="submitted after the step's first token"):
        step_layouts(dataclasses.replace(run, rollouts=late))


def _write_cpu_log(run_dir, cpu_gen_s):
    """learner.jsonl with the given per-step generation CPU seconds (train, sync: 0)."""
    lines = [
        json.dumps({"step": t, "cpu_gen_s": float(c), "cpu_train_s": 0.0, "cpu_sync_s": 0.0})
        for t, c in enumerate(cpu_gen_s)
    ]
    (run_dir / "learner.jsonl").write_text("\n".join(lines) + "\n")


def test_the_cpu_clock_gives_a_loaded_step_its_unloaded_length_back(tmp_path):
    from rolloutlab.analysis.inputs.run_input import on_cpu_clock

    quiet = load_run(write_run(tmp_path / "quiet", [4] * 4))
    loaded_dir = write_run(tmp_path / "loaded", [4] * 4, slow={2: 3.0})
    # the process did the same work: its CPU time is the quiet run's generation time
    _write_cpu_log(loaded_dir, quiet.steps["gen_time"].to_numpy())
    loaded = load_run(loaded_dir)
    assert step_layouts(loaded)[2].finish_s.max() > 2 * step_layouts(quiet)[2].finish_s.max()
    for a, b in zip(step_layouts(on_cpu_clock(loaded)), step_layouts(quiet)):
        np.testing.assert_allclose(a.finish_s, b.finish_s, rtol=1e-12)


def test_the_cpu_clock_needs_the_cpu_fields_and_generation_on_this_cpu(tmp_path):
    from rolloutlab.analysis.inputs.run_input import on_cpu_clock

    run_dir = write_run(tmp_path / "r", [4] * 4)
    with pytest.raises(RunInputError, match="cpu_gen_s.*missing"):
        on_cpu_clock(load_run(run_dir))
    _write_cpu_log(run_dir, [0.1] * 4)
    cfg = json.loads((run_dir / "config.json").read_text())
    cfg["config"]["engine"] = "vllm"
    (run_dir / "config.json").write_text(json.dumps(cfg))
    args = ["compare", "idle", "--real", str(run_dir), "--clock", "cpu", "--fit-steps", "2"]
    for info in ({"cuda_device": 0, "config": {"in_process": True}}, None):  # GPU; unknown
        if info is not None:
            (run_dir / "engine.json").write_text(json.dumps(info))
        else:
            (run_dir / "engine.json").unlink()
        res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "o")])
        assert res.exit_code == 2 and "needs generation on this process's CPU" in res.output
        assert not (tmp_path / "o").exists()
    # vLLM on CPU with its engine core in the run's process: its CPU time is the run's
    (run_dir / "engine.json").write_text(
        json.dumps({"cuda_device": None, "config": {"in_process": True}})
    )
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output


def test_repeat_lookup_predicts_each_repeat_by_the_others_median(tmp_path):
    bench = _idle_bench()
    held = {"x_r0": (1.0, 2.0), "x_r1": (2.0, 2.0), "x_r2": (4.0, 1.0), "z_r0": (3.0, 3.0)}
    dirs = []
    for name, (a, b) in held.items():
        d = tmp_path / name
        d.mkdir()
        pl.DataFrame(
            {
                "step": [0, 1, 2, 3],
                "split": ["fit", "fit", "held_out", "held_out"],
                "measured_makespan_s": [9.0, 9.0, a, b],
            }
        ).write_csv(d / "idle_comparison.csv")
        dirs.append(d)
    got = bench.repeat_lookup(dirs)
    # x_r0: others' medians (3.0, 1.5) against (1.0, 2.0): errors 2.0 and 0.25
    assert got[tmp_path / "x_r0"] == pytest.approx(1.125)
    # x_r1: (2.5, 1.5) against (2.0, 2.0): 0.25 and 0.25
    assert got[tmp_path / "x_r1"] == pytest.approx(0.25)
    # x_r2: (1.5, 2.0) against (4.0, 1.0): 0.625 and 1.0
    assert got[tmp_path / "x_r2"] == pytest.approx(0.8125)
    assert tmp_path / "z_r0" not in got  # no other repeat of z


def test_repeat_lookup_names_a_repeat_missing_a_step(tmp_path):
    bench = _idle_bench()
    for name, steps in (("x_r0", [0, 1, 2]), ("x_r1", [0, 1])):
        d = tmp_path / name
        d.mkdir()
        pl.DataFrame(
            {
                "step": steps,
                "split": ["fit", "held_out", "held_out"][: len(steps)],
                "measured_makespan_s": [1.0] * len(steps),
            }
        ).write_csv(d / "idle_comparison.csv")
    with pytest.raises(ValueError, match="x_r1.*lacks held-out steps of x_r0"):
        bench.repeat_lookup([tmp_path / "x_r0", tmp_path / "x_r1"])


def test_repeat_lookup_names_the_file_and_row_of_a_bad_makespan(tmp_path):
    bench = _idle_bench()
    for name, value in (("x_r0", "1.0"), ("x_r1", "nan")):
        d = tmp_path / name
        d.mkdir()
        (d / "idle_comparison.csv").write_text(
            f"step,split,measured_makespan_s\n0,fit,1.0\n1,held_out,{value}\n"
        )
    with pytest.raises(
        ValueError, match=r"x_r1/idle_comparison.csv: row 2: measured_makespan_s is nan"
    ):
        bench.repeat_lookup([tmp_path / "x_r0", tmp_path / "x_r1"])
