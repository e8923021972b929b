"""Every timing_s/* phase of a verl step: shares, the reward-phase and periodic fits, the
whole-step hold-out (calibration.fits.phase_fit, calibration.validation.step_holdout)."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from rolloutlab.calibration.fits.phase_fit import (
    explained_share,
    fit_periodic,
    fit_reward_phase,
    phase_table,
    step_baselines,
)
from rolloutlab.calibration.fits.verl_fit import VerlFitConfig
from rolloutlab.calibration.scenarios.verl import calibrate_verl
from rolloutlab.calibration.validation.step_holdout import heldout_steps, score
from rolloutlab.sim.models.step_phases import RewardLatency, reward_finish_s
from rolloutlab.sim.scenario.scenario import scenario_from_dict

from tests.calib_helpers import SAMPLE_RUN

KEPT_BACK = SAMPLE_RUN.parent / "q3b_mcore_base"


def table(n=20, **cols) -> pl.DataFrame:
    return pl.DataFrame(
        {"step": np.arange(1, n + 1), **{f"timing_s/{k}": v for k, v in cols.items()}}
    )


def test_shares_count_top_level_phases_once_and_name_the_rest():
    t = table(
        4,
        step=[100.0] * 4,
        gen=[20.0] * 4,
        generate_sequences=[15.0] * 4,  # inside gen
        update_actor=[50.0] * 4,
        mystery=[10.0] * 4,
    )
    rows = {r.phase: r for r in phase_table(t)}
    assert rows["gen"].share == 0.2 and rows["update_actor"].share == 0.5
    assert rows["generate_sequences"].kind == "nested in gen"
    assert rows["mystery"].priced_by == "not priced" and rows["mystery"].share == 0.1
    assert rows["other"].share == pytest.approx(0.2)  # 100 - 20 - 50 - 10
    assert explained_share(list(rows.values())) == pytest.approx(0.7)


def test_shares_need_the_step_tag():
    with pytest.raises(ValueError, match="timing_s/step"):
        phase_table(table(3, gen=[1.0, 1.0, 1.0]))


def test_asynchronous_reward_scale_is_recovered():
    # windows made by the queue model itself at twice the assumed law: k = 2
    shape = RewardLatency("uniform", 1.0, 5.0)
    rng = np.random.default_rng(7)
    n, W = 400, 16
    window = np.array(
        [reward_finish_s(np.zeros(n), 2 * shape.sample(rng, n), W) for _ in range(20)]
    )
    t = table(
        20,
        reward=[0.5] * 20,
        old_log_prob=[10.0] * 20,
        ref=[10.0] * 20,
        adv=(window - 20.0).tolist(),
        update_actor=[60.0] * 20,
        step=(window + 90.0).tolist(),
    )
    fit = fit_reward_phase(t, n, shape, W)
    assert fit.phase.overlap == "learner" and fit.identified
    assert fit.scale == pytest.approx(2.0, rel=0.02)
    assert fit.phase.learner_overlap_share == pytest.approx(0.25)
    assert fit.phase.adv_s == 0.5


def test_a_reward_inside_its_own_timer_is_read_as_after():
    t = table(5, reward=[300.0] * 5, adv=[1.0] * 5, step=[400.0] * 5)
    fit = fit_reward_phase(t, 100, RewardLatency("constant", 1.0), 10)
    # 100 requests of 1 s on 10 workers: 10 s; the window is 300 s
    assert fit.phase.overlap == "after"
    assert fit.scale == pytest.approx(30.0)
    assert fit.phase.adv_s == 1.0


def test_a_hidden_reward_is_said_to_be_unidentified():
    t = table(5, reward=[0.5] * 5, old_log_prob=[40.0] * 5, ref=[40.0] * 5, adv=[1.0] * 5)
    fit = fit_reward_phase(t, 100, RewardLatency("constant", 1.0), 10)
    assert not fit.identified and "not identified" in fit.note
    assert fit.phase.adv_s == 1.0 and fit.phase.latency.mean_s() == 0.0


def test_no_reward_tags_no_reward_phase():
    assert fit_reward_phase(table(3, gen=[1.0] * 3), 10, RewardLatency(), 1) is None


def test_periodic_phase_period_and_the_last_step_apart():
    steps = list(range(20, 101, 20)) + [105]
    t = pl.DataFrame(
        {
            "step": np.arange(1, 106),
            "timing_s/save_checkpoint": [12.0 if s in steps else None for s in range(1, 106)],
        }
    )
    f = fit_periodic(t, "save_checkpoint")
    assert (f.phase.every, f.phase.seconds) == (20, 12.0)
    assert f.off_period_steps == [105]
    once = t.with_columns(pl.when(pl.col("step") == 20).then(1.0).alias("timing_s/x"))
    assert fit_periodic(once, "x") is None


def test_step_baselines_by_hand():
    t = pl.DataFrame(
        {
            "step": [1, 2, 3],
            "timing_s/step": [10.0, 12.0, 14.0],
            "response_length/mean": [1.0, 2.0, 3.0],
            "response_length/max": [1.0, 1.0, 1.0],
        }
    )
    b = step_baselines([t])
    assert b["constant_s"] == 12.0
    # y = 8 + 2 mean exactly (max is constant, so it shares the intercept)
    X = np.array([[1, 1, 1], [1, 2, 1], [1, 3, 1]])
    np.testing.assert_allclose(X @ np.array(b["linear_coef"]), [10, 12, 14])


def test_part_baselines_by_hand():
    # gen = 2 mean exactly; the learner sums its three tags; testing runs at step 3 only
    t = pl.DataFrame(
        {
            "step": [1, 2, 3, 4],
            "timing_s/step": [10.0, 12.0, 30.0, 16.0],
            "response_length/mean": [1.0, 2.0, 3.0, 4.0],
            "response_length/max": [5.0, 5.0, 5.0, 5.0],
            "timing_s/gen": [2.0, 4.0, 6.0, 8.0],
            "timing_s/old_log_prob": [1.0, 1.0, 1.0, 1.0],
            "timing_s/ref": [1.0, 1.0, 1.0, 1.0],
            "timing_s/update_actor": [3.0, 5.0, 5.0, 7.0],
            "timing_s/testing": [None, None, 9.0, None],
        }
    )
    parts = step_baselines([t])["parts"]
    assert parts["gen"]["constant_s"] == 5.0  # median of 2, 4, 6, 8
    assert parts["learner"]["constant_s"] == 7.0  # median of 5, 7, 7, 9
    assert parts["periodic"]["constant_s"] == 0.0  # not logged = 0 s
    assert parts["reward_wait"]["constant_s"] == 0.0  # no reward tags at all
    X = np.array([[1, 1, 5], [1, 2, 5], [1, 3, 5], [1, 4, 5]])
    np.testing.assert_allclose(X @ np.array(parts["gen"]["linear_coef"]), [2, 4, 6, 8])


@pytest.fixture(scope="module")
def sample_calibration():
    return calibrate_verl([str(SAMPLE_RUN)], VerlFitConfig())


def test_calibrate_writes_every_phase_and_the_step_phases_block(sample_calibration):
    d = sample_calibration
    phases = {r["phase"]: r for r in d["fit"]["phases"]["q3b_fsdp_base"]["phases"]}
    # the reward wait (adv) is most of this run's step; none of the step is left unnamed
    assert phases["adv"]["share"] > 0.5
    assert d["fit"]["phases"]["q3b_fsdp_base"]["explained_share"] > 0.99
    sc = scenario_from_dict(d)
    assert sc.step_phases.reward.overlap == "learner"
    assert [p.every for p in sc.step_phases.periodic] == [5, 20]
    # the recipe sleeps U(1, 40) s per sample on 256 threads: the fitted scale is near 1
    assert d["fit"]["step_phases"]["reward"]["scale"] == pytest.approx(1.0, abs=0.05)
    assert d["provenance"]["assumptions"]["reward_workers"] == 256


@pytest.mark.slow
def test_kept_back_run_whole_step_meets_the_plan(sample_calibration):
    # plan (docs/step_phases.md, fixed before scoring): median per-step error <= 15 %
    # and mean error below the constant's and the linear's; ~20 s of engine runs
    steps = heldout_steps(scenario_from_dict(sample_calibration), [str(KEPT_BACK)], VerlFitConfig())
    s = {r["rule"]: r for r in score(steps).to_dicts()}
    assert s["model"]["steps"] == 104
    assert s["model"]["median_ape"] <= 0.15
    assert s["model"]["mape"] < min(s["constant"]["mape"], s["linear"]["mape"])
    # per part, the calibration's own baselines are scored too (docs/step_phases.md): a
    # phase every 5 steps is what a constant or the previous step cannot price
    from rolloutlab.calibration.validation.step_holdout import part_shares

    periodic = part_shares(steps).filter(pl.col("part") == "periodic").row(0, named=True)
    assert periodic["mae_model"] < min(periodic[f"mae_{r}"] for r in ("constant", "linear"))
    assert periodic["mae_persistence"] is not None


def test_calibrate_prints_assumptions_and_every_phase_and_validate_refuses_a_fitted_run(
    tmp_path,
):
    from click.testing import CliRunner

    from rolloutlab.cli import main

    cal = tmp_path / "cal.json"
    res = CliRunner().invoke(main, ["calibrate", "verl-tb", str(SAMPLE_RUN), "--out", str(cal)])
    assert res.exit_code == 0, res.output
    assert "assumed (the log does not say" in res.output and "G = 5" in res.output
    for phase in ("adv", "update_actor", "testing", "save_checkpoint", "other"):
        assert f" {phase} " in res.output
    assert "prices 99.99% of timing_s/step" in res.output
    assert "fitted latency scale" in res.output
    out = tmp_path / "val"
    res = CliRunner().invoke(
        main, ["compare", "verl-tb", str(SAMPLE_RUN), "--calibration", str(cal), "--out", str(out)]
    )
    assert res.exit_code == 2 and "fitted every step" in res.output
    assert not out.exists()
    sim = ["sim", "--calibration", str(cal), "--controller", "static:5,static:2", "--prompts", "64"]
    res = CliRunner().invoke(  # wide enough that the table prints as one block
        main,
        [*sim, "--steps", "5", "--engine", "fast", "--no-figure", "--out", str(out)],
        env={"COLUMNS": "400"},
    )
    assert res.exit_code == 0, res.output
    assert "prices the step's reward and periodic phases" in res.output
    # one row of phase means per controller, read off its own steps (never pooled)
    rows = {
        cells[0]: cells
        for line in res.output.splitlines()
        if (cells := [c.strip() for c in line.strip("│ ").split("┆")])[0]
        in ("static:5", "static:2")
        and len(cells) == 8
    }
    steps = pl.read_parquet(out / "steps.parquet")
    for run, cells in rows.items():
        own = steps.filter(pl.col("run_id") == run)
        assert cells[5:] == [
            f"{own[c].mean():.1f}" for c in ("sync_time", "reward_wait_s", "periodic_s")
        ]
    assert rows["static:5"][6] != rows["static:2"][6]  # more rollouts, a longer reward wait
    # the fifth step runs validation (every 5): one in five steps pays it
    testing = next(p for p in scenario_from_dict(json.loads(cal.read_text())).step_phases.periodic)
    assert rows["static:5"][7] == f"{testing.seconds / 5:.1f}"


def test_part_shares_by_hand():
    from rolloutlab.calibration.validation.step_holdout import part_shares

    steps = pl.DataFrame(
        {
            "run": ["r", "r"],
            "measured_s": [100.0, 300.0],
            "model_s": [200.0, 200.0],
            **{f"measured_{p}_s": [10.0, 30.0] for p in ("gen", "learner", "periodic")},
            "measured_reward_wait_s": [70.0, 210.0],
            **{f"{p}_s": [50.0, 50.0] for p in ("gen", "learner", "reward_wait", "periodic")},
            "sync_s": [0.0, 0.0],
        }
    )
    rows = {r["part"]: r for r in part_shares(steps).to_dicts()}
    assert rows["gen"]["measured_s"] == 20.0 and rows["gen"]["measured_share"] == 0.1
    assert rows["reward_wait"]["measured_share"] == 0.7
    assert rows["learner"]["model_share"] == 0.25 and rows["sync"]["measured_s"] is None
    # |50 - 10|, |50 - 30| -> 30; no per-part baselines in this table -> no baseline error
    assert rows["gen"]["mae_model"] == 30.0 and rows["gen"]["mae_constant"] is None
    assert rows["sync"]["mae_model"] is None


def test_part_errors_of_the_naive_rules_by_hand():
    from rolloutlab.calibration.validation.step_holdout import part_shares

    parts = ("gen", "learner", "reward_wait", "periodic")
    steps = pl.DataFrame(
        {
            "run": ["r", "r", "r"],
            "measured_s": [100.0, 100.0, 100.0],
            "model_s": [100.0, 100.0, 100.0],
            **{f"measured_{p}_s": [10.0, 20.0, 40.0] for p in parts},
            **{f"{p}_s": [10.0, 20.0, 40.0] for p in parts},
            **{f"constant_{p}_s": [20.0, 20.0, 20.0] for p in parts},
            **{f"linear_{p}_s": [11.0, 21.0, 41.0] for p in parts},
            # the first scored step has no previous step: persistence skips it
            **{f"persistence_{p}_s": [None, 10.0, 20.0] for p in parts},
            "sync_s": [0.0, 0.0, 0.0],
        }
    )
    row = part_shares(steps).filter(pl.col("part") == "gen").row(0, named=True)
    assert row["mae_model"] == 0.0
    assert row["mae_constant"] == pytest.approx(10.0)  # (10 + 0 + 20) / 3
    assert row["mae_linear"] == pytest.approx(1.0)
    assert row["mae_persistence"] == pytest.approx(15.0)  # (10 + 20) / 2


def test_a_log_without_a_step_time_still_calibrates_and_says_so(tmp_path):
    from click.testing import CliRunner

    from rolloutlab.cli import main
    from tests.calib_helpers import verl_row, write_events

    run = tmp_path / "run"
    write_events(run, {s: verl_row(s) for s in range(1, 8)})  # no timing_s/step tag
    cal = tmp_path / "cal.json"
    res = CliRunner().invoke(main, ["calibrate", "verl-tb", str(run), "--out", str(cal)])
    assert res.exit_code == 0, res.output
    assert "no timing_s/step tag" in res.output
    d = json.loads(cal.read_text())
    assert d["fit"]["step_baselines"] is None and "step_phases" not in d
