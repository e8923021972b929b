"""Per-update rows of the simulator (updates.parquet) with --updates-per-batch K > 1."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from rolloutlab.sim.models.learning import LearningParams
from rolloutlab.sim.models.passrate import BetaPassRate
from rolloutlab.sim.models.rewards import RewardConfig, RewardTracker
from rolloutlab.sim.models.update_log import UPDATE_SCHEMA, UpdateLog

from rolloutlab.cli import main


def tracker(K: int, log: UpdateLog | None, B: int = 8) -> RewardTracker:
    cfg = RewardConfig(pass_rate=BetaPassRate(0.6, 1.4), learning=LearningParams(kappa=1.0))
    return RewardTracker(cfg, seed=0, lr=1e-8, batch_size=B, updates=K, log=log)


def test_each_mini_batch_is_a_row_with_span_s_plus_j_plus_one():
    log = UpdateLog()
    t = tracker(4, log)
    stale = np.array([0, 1, 2, 3, 0, 0, 5, 1])
    rewards = [np.array([1.0, 0.0, 1.0, 0.0])] * 8
    shift = t.learn(rewards, step=3, staleness=stale)
    df = log.table("r")
    assert df.schema == pl.Schema(UPDATE_SCHEMA)
    assert df["update"].to_list() == [0, 1, 2, 3] and set(df["step"]) == {3}
    assert df["prompts"].to_list() == [2, 2, 2, 2]
    # mini-batch j holds groups 2j, 2j+1: spans s + j + 1
    assert df["span_min"].to_list() == [1, 4, 3, 5]
    assert df["span_max"].to_list() == [2, 5, 3, 9]
    assert df["drive"].sum() == pytest.approx(shift)
    assert df["theta"][-1] == pytest.approx(t.model.theta)


def test_the_log_does_not_change_the_learning():
    with_log, without = tracker(2, UpdateLog()), tracker(2, None)
    rewards = [np.array([1.0, 0.0, 0.0, 0.0])] * 8
    for step in range(5):
        assert with_log.learn(rewards, step) == without.learn(rewards, step)


def test_the_log_records_the_collapse_step():
    log = UpdateLog()
    t = tracker(2, log)
    t.lr = 1e-3  # eta = 10: far past every safe span
    t.learn([np.array([1.0, 0.0])] * 8, step=6)
    assert log.t_collapse == 7 and log.rows[-1]["collapsed"]


def _sim(tmp_path, name, *extra):
    out = tmp_path / name
    args = ["sim", "--controller", "static:4", "--steps", "6", "--prompts", "8", "--no-figure"]
    res = CliRunner().invoke(main, [*args, *extra, "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


@pytest.mark.parametrize(("pipeline", "s_max"), [("sync", 0), ("bounded:2", 2)])
def test_sim_writes_k_rows_per_step(tmp_path, pipeline, s_max):
    out = _sim(tmp_path, "k4", "--updates-per-batch", "4", "--pipeline", pipeline)
    df = pl.read_parquet(out / "updates.parquet")
    steps = pl.read_parquet(out / "steps.parquet")
    assert df.height == 4 * steps.height
    assert df.group_by("step").len()["len"].to_list() == [4] * steps.height
    j = df["update"]
    assert (df["span_min"] >= j + 1).all() and (df["span_max"] <= j + 1 + s_max).all()
    if s_max == 0:
        assert (df["span_min"] == j + 1).all() and (df["span_max"] == j + 1).all()
    assert (df["prompts"] == 2).all()
    summary = pl.read_csv(out / "summary.csv")
    assert "t_collapse" in summary.columns


def test_one_update_per_batch_writes_no_update_table(tmp_path):
    out = _sim(tmp_path, "k1")
    assert not (out / "updates.parquet").exists()
