"""Several optimizer updates per rollout batch (--updates-per-batch K, verl's mini-batches):
later mini-batches train off-policy, in the learning law and in the collapse rule."""

from __future__ import annotations

import click
import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from rolloutlab.analysis.advise.evaluate import collapse_margin
from rolloutlab.sim.models.learning import LearningParams
from rolloutlab.sim.models.passrate import BetaPassRate
from rolloutlab.sim.models.rewards import RewardConfig, RewardTracker, check_updates

from rolloutlab.cli import main

PARAMS = LearningParams(kappa=1.0)


def tracker(K: int, B: int = 8) -> RewardTracker:
    """A tracker whose pass rates move (a Beta spec with learning), K updates per batch."""
    cfg = RewardConfig(pass_rate=BetaPassRate(0.6, 1.4), learning=PARAMS)
    t = RewardTracker(cfg, seed=0, lr=1e-8, batch_size=B, updates=K)
    assert t.model is not None
    return t


def groups(n: int, G: int = 4) -> list[np.ndarray]:
    """``n`` informative groups of G 0/1 rewards (half right)."""
    return [np.array([1.0, 0.0] * (G // 2)) for _ in range(n)]


@pytest.mark.parametrize("K", [1, 2, 4, 8])
def test_k_updates_move_the_policy_k_times_as_far_at_a_small_learning_rate(K):
    one, many = tracker(1), tracker(K)
    d1 = one.learn(groups(8), step=0)
    dk = many.learn(groups(8), step=0)
    assert d1 > 0
    # each later mini-batch is discounted a little (off-policy factor, saturation): never more
    assert 0.99 * K * d1 <= dk <= K * d1 * (1 + 1e-12)


@settings(max_examples=150, deadline=None)
@given(s_max=st.integers(0, 6), K=st.sampled_from([1, 2, 4, 8]), log_lr=st.floats(-8.0, -4.0))
def test_the_margin_with_k_updates_is_below_one_exactly_where_the_model_collapses(s_max, K, log_lr):
    lr = 10.0**log_lr
    margin = collapse_margin(lr, s_max, 1, PARAMS, updates=K)
    assume(abs(margin - 1.0) > 1e-9)
    t = tracker(K)
    t.lr = lr
    t.learn(groups(8), step=0, staleness=np.full(8, s_max))
    assert t.model.collapsed == (margin < 1.0), (margin, K, s_max)


@pytest.mark.parametrize(
    ("K", "B", "words"),
    [
        (0, 8, ">= 1"),
        (-2, 8, ">= 1"),
        (True, 8, ">= 1"),
        (3, 8, "must divide"),
        (16, 8, "must divide"),
    ],
)
def test_k_must_be_a_divisor_of_the_batch(K, B, words):
    with pytest.raises(ValueError, match=words):
        check_updates(K, B)


def test_sim_with_two_updates_per_batch_learns_faster_per_step(tmp_path):
    rows = {}
    for K in (1, 2):
        out = tmp_path / f"k{K}"
        args = ["sim", "--controller", "static:8", "--steps", "40", "--no-figure"]
        res = CliRunner().invoke(main, [*args, "--updates-per-batch", str(K), "--out", str(out)])
        assert res.exit_code == 0, res.output
        rows[K] = pl.read_csv(out / "summary.csv").row(0, named=True)
    assert rows[2]["wall_clock_s"] == rows[1]["wall_clock_s"]  # the same tokens, same time
    assert rows[2]["time_to_target_s"] < rows[1]["time_to_target_s"]


def test_sim_refuses_k_that_does_not_divide_the_batch(tmp_path):
    args = ["sim", "--steps", "3", "--prompts", "16", "--updates-per-batch", "3"]
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "must divide the prompt batch B = 16" in res.output
    assert not (tmp_path / "o").exists()


def test_real_sync_takes_k_as_the_learners_minibatches(tmp_path):
    from rolloutlab.real.rundir.config import config_from_options

    from rolloutlab.commands.real.group import real

    sync = real.get_command(None, "sync")
    ctx = sync.make_context("sync", ["--out", str(tmp_path / "o"), "--updates-per-batch", "3"])
    assert config_from_options(ctx.params).learner.minibatches == 3
    with pytest.raises(click.BadParameter, match="not in the range"):
        sync.make_context("sync", ["--out", str(tmp_path / "o"), "--updates-per-batch", "0"])
