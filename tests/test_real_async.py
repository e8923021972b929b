"""The asynchronous loop end to end with tiny budgets: traces, staleness bound, S = 0 equals sync,
a dead generator, resume, the collapse criteria, and a tiny stability grid."""

import json
import math
import os
import signal

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from rolloutlab.real.rundir.async_config import AsyncConfig
from rolloutlab.real.rundir.config import ConfigError
from rolloutlab.real.runners.async_loop import AsyncRun, fresh_enough, run_async
from rolloutlab.real.runners.async_workers import GeneratorDied
from rolloutlab.real.runners.collapse import CollapseConfig, CollapseDetector
from rolloutlab.real.runners.sync import run_sync
from rolloutlab.sim.trace.metrics import pipeline_summary, staleness
from rolloutlab.sim.trace.schema import read

from tests.real_helpers import tiny_config

TIMING = ["run_id", "t_submit", "t_first_token", "t_finish"]


@pytest.mark.parametrize("spec, S_max", [("one-step-off", 1), ("interval:3", 2), ("bounded:2", 2)])
def test_every_consumed_rollout_is_at_most_S_max_stale_and_versions_are_filled(
    tmp_path, spec, S_max
):
    # no dynamic sampling: a 2-step warm start earns no reward, yet every step must update
    cfg = tiny_config(steps=5, eval_every=100, dynamic_sampling=False)
    rollouts, steps = run_async(AsyncConfig(sync=cfg, pipeline=spec), tmp_path, progress=False)
    assert steps["step"].to_list() == list(range(5))
    assert (rollouts["learner_version"] == rollouts["step"]).all()
    s = staleness(rollouts)
    assert s.min() >= 0 and s.max() <= S_max
    summary = pipeline_summary(rollouts, steps, S_max)
    assert summary["dropped"] == 0 and 0 <= summary["generator_idle_frac"] <= 1
    assert read(tmp_path / "steps.parquet", "steps")["grad_cosine"][1:].is_not_null().all()
    assert json.loads((tmp_path / "collapse.json").read_text())["pipeline"] == spec
    learner = [json.loads(x) for x in (tmp_path / "learner.jsonl").read_text().splitlines()]
    assert [r["step"] for r in learner] == list(range(5))  # the speed probe, every step
    assert all(r["timing_s/probe"] > 0 for r in learner)


def test_the_learning_aware_controller_runs_in_the_async_loop_and_sees_rewards(tmp_path):
    cfg = tiny_config(steps=4, eval_every=100, controller="lagc:candidates=2/4,init_G=2")
    _, steps = run_async(AsyncConfig(sync=cfg, pipeline="one-step-off"), tmp_path, progress=False)
    states = [json.loads(s) for s in steps["controller_state"].to_list()]
    assert [s["steps_observed"] for s in states] == [1, 2, 3, 4]
    assert states[-1]["pop"]["samples"] > 0 and states[-1]["spt"]  # rewards and times seen


def test_with_S_0_the_async_path_trains_on_exactly_the_synchronous_rollouts(tmp_path):
    cfg = tiny_config(steps=4, controller="sagc:candidates=2/4,init_G=2")
    r_sync, s_sync = run_sync(cfg, tmp_path / "sync", progress=False)
    r_async, s_async = run_async(
        AsyncConfig(sync=cfg, pipeline="bounded:0"), tmp_path / "async", progress=False
    )
    assert r_async.drop(TIMING).equals(r_sync.drop(TIMING))
    cols = ["step", "reward_mean", "kl", "grad_norm", "grad_cosine", "controller_state"]
    assert s_async.select(cols).equals(s_sync.select(cols))


def test_a_generator_killed_mid_run_ends_the_run_with_a_clear_error_and_keeps_every_trained_step(
    tmp_path,
):
    cfg = AsyncConfig(
        sync=tiny_config(steps=50, eval_every=100, checkpoint_every=100), pipeline="one-step-off"
    )
    run = AsyncRun(cfg, tmp_path, "kill-run", resume=False)
    run.generator.start()
    trained = 0
    with pytest.raises(GeneratorDied, match="exited with code"):
        try:
            for t in range(cfg.sync.steps):
                run.step(t)
                trained += 1
                if t == 1:
                    os.kill(run.generator.pid, signal.SIGKILL)
        finally:
            run.generator.stop()
            rollouts, steps = run.writer.close()
    assert 2 <= trained < cfg.sync.steps
    assert steps["step"].to_list() == list(range(trained))
    assert rollouts["step"].unique().sort().to_list() == list(range(trained))


def test_a_resumed_run_records_every_step_exactly_once(tmp_path):
    base = tiny_config(steps=2, checkpoint_every=2, eval_every=100)
    run_async(AsyncConfig(sync=base, pipeline="one-step-off"), tmp_path, progress=False)
    rollouts, steps = run_async(
        AsyncConfig(sync=base, pipeline="one-step-off"),
        tmp_path,
        resume=True,
        progress=False,
        overrides={"sync.steps": 4},
    )
    assert steps["step"].to_list() == [0, 1, 2, 3]
    assert staleness(rollouts).max() <= 1


def test_pipelines_the_real_loop_cannot_run_are_refused():
    for spec in ("partial:2", "oversample:1.5", "sync", "bogus:1"):
        with pytest.raises(ConfigError):
            AsyncConfig(pipeline=spec)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=20), st.integers(0, 30), st.integers(0, 8))
def test_fresh_enough_keeps_exactly_the_groups_within_the_bound(versions, extra, S):
    learner = max(versions) + extra
    keep = fresh_enough(versions, learner, S)
    s = learner - np.array(versions)
    assert (s[keep] <= S).all() and (s[~keep] > S).all()


def test_a_version_ahead_of_the_learner_is_a_bug_that_is_reported():
    with pytest.raises(ValueError, match="ahead"):
        fresh_enough([5], 4, 2)


def first_window_below(rewards, frac, k, min_best):
    """Reference: first 1-based t whose last k rewards were each below frac x the best so far."""
    best = np.maximum.accumulate(rewards)
    low = (np.asarray(rewards) < frac * best) & (best > min_best)
    for t in range(k - 1, len(rewards)):
        if low[t - k + 1 : t + 1].all():
            return t + 1
    return None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=40), st.integers(1, 5))
def test_the_reward_criterion_fires_at_the_first_window_of_k_steps_below_the_fraction(rewards, k):
    det = CollapseDetector(
        CollapseConfig(reward_frac=0.5, patience=k, reward_ema=1.0, min_best=0.1)
    )
    for t, r in enumerate(rewards):
        det.observe(t, r)
    assert det.t_collapse == first_window_below(rewards, 0.5, k, 0.1)
    assert det.failure == ("none" if det.t_collapse is None else "reward")


def test_the_reward_criterion_fires_after_patience_steps_below_the_fraction():
    det = CollapseDetector(
        CollapseConfig(reward_frac=0.5, patience=3, reward_ema=1.0, min_best=0.1)
    )
    for t, r in enumerate([0.6, 0.8, 0.5, 0.3, 0.3]):
        assert det.observe(t, r) is None
    assert det.observe(5, 0.3) == "reward" and det.t_collapse == 6


@pytest.mark.parametrize(
    "kw, failure",
    [
        ({"kl": math.nan}, "nan"),
        ({"loss": math.inf}, "nan"),
        ({"kl": 5.0}, "kl"),
        ({"log_ratio": 3.0}, "ratio"),
    ],
)
def test_nan_kl_and_ratio_criteria_fire_at_once_and_the_first_failure_sticks(kw, failure):
    det = CollapseDetector(CollapseConfig())
    assert det.observe(0, 0.5, kl=0.01, log_ratio=0.01) is None
    assert det.observe(1, 0.5, **kw) == failure
    assert det.observe(2, math.nan) is None and (det.t_collapse, det.failure) == (2, failure)
    restored = CollapseDetector(CollapseConfig())
    restored.load_state_dict(json.loads(json.dumps(det.state_dict())))
    assert restored.state_dict() == det.state_dict()


def test_a_tiny_stability_grid_writes_the_simulator_columns(tmp_path):
    from rolloutlab.real.runners.stability import CSV_COLUMNS, GridConfig, run_grid
    from rolloutlab.sim.studies.stability import CSV_COLUMNS as SIM_COLUMNS

    grid = GridConfig(
        S_values=(2,),
        lrs=(1e-4, 0.5),
        seeds=1,
        jobs=2,
        base=AsyncConfig(sync=tiny_config(steps=3, eval_every=3, checkpoint_every=3)),
    )
    df = run_grid(grid, tmp_path)
    assert CSV_COLUMNS[:8] == SIM_COLUMNS[:8]
    assert df.height == 2 and df.columns == CSV_COLUMNS
    assert df.filter(pl.col("S") == 2)["staleness_max"].max() <= 1
    assert df.filter(pl.col("collapsed"))["t_collapse"].is_not_null().all()
    again = run_grid(grid, tmp_path)  # finished runs are reused, not rerun
    assert again.drop("wall_s").equals(df.drop("wall_s"))
