"""The tail-fix study: ranking and the straggler wait, on hand-made runs
and on a small simulated one."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from rolloutlab.sim.engine.speculative import SpeculativeDecoding
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.studies.tail import Arm, default_arms, rank, run_tail_study, straggler_wait_s

from tests.test_groupover import wide


def test_rank_orders_by_mean_time_to_target_unreached_last():
    nan = float("nan")
    runs = pl.DataFrame(
        {
            "arm": ["base", "base", "fast", "fast", "never"],
            "seed": [0, 1, 0, 1, 0],
            "time_to_target_s": [100.0, 120.0, 50.0, 70.0, nan],
            "wall_clock_s": [200.0, 200.0, 150.0, 150.0, 300.0],
            "straggler_wait_s": [40.0, 60.0, 10.0, 20.0, 5.0],
            "len_bias": [1.0, 1.0, 0.8, 0.8, 1.0],
            "mean_G": [8.0] * 5,
        }
    )
    t = rank(runs, ["base", "fast", "never"])
    assert t["arm"].to_list() == ["fast", "base", "never"] and t["rank"].to_list() == [1, 2, 3]
    fast = t.row(0, named=True)
    assert fast["time_to_target_s"] == 60.0 and (fast["ttt_min_s"], fast["ttt_max_s"]) == (50, 70)
    assert fast["wait_removed_s"] == 50.0 - 15.0
    assert math.isnan(t.row(2, named=True)["time_to_target_s"])


def test_straggler_wait_is_the_padding_of_each_step():
    r = pl.DataFrame(
        {
            "step": [0, 0, 0, 1, 1],
            "t_finish": [1.0, 3.0, 4.0, 10.0, 12.0],
            "finish_reason": ["stop", "stop", "stop", "stop", "abort"],
        }
    )
    assert straggler_wait_s(r) == (3.0 + 1.0 + 0.0) + 0.0  # the abort row is not trained on


def test_study_runs_every_arm_and_speculation_removes_wait():
    speculative = SpeculativeDecoding(k=3, alpha=0.8)
    arms = [a for a in default_arms(4, speculative, 8) if a.name != "SAGC"]
    assert [a.name for a in arms][0] == "static G=4"
    table, runs = run_tail_study(wide(slots=64), RunConfig(steps=3, prompts=4), arms, [0, 1], None)
    assert runs.height == 2 * len(arms) and table.height == len(arms)
    by = {r["arm"]: r for r in table.iter_rows(named=True)}
    base = by["static G=4"]
    for name in ("spec decoding, all steps", "spec decoding, tail < 8"):
        assert by[name]["wall_clock_s"] < base["wall_clock_s"]
        assert by[name]["wait_removed_s"] > 0
    assert by["tail batching (drop)"]["len_bias"] < 1.0
    assert np.isnan(table["time_to_target_s"].to_numpy()).all()  # no rewards: no target


def test_speculation_on_an_async_arm_is_refused_before_any_run():
    bad = [Arm("x", "static:4", "partial:1", speculative=SpeculativeDecoding(k=2, alpha=0.5))]
    with pytest.raises(ValueError, match="sync pipelines only"):
        run_tail_study(wide(), RunConfig(steps=2, prompts=4), bad, [0], None)


def test_cli_says_when_arms_never_reached_the_target(tmp_path):
    from click.testing import CliRunner

    from rolloutlab.cli import main

    args = ["tail-study", "--steps", "2", "--seeds", "1", "--prompts", "4"]
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert "did not reach reward" in res.stderr and "raise --steps" in res.stderr
