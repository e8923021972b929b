"""``advise``'s collapse margin and the simulated collapse agree on every
pipeline kind, with K = 1, 2 and 4 optimizer updates per rollout batch. Each run is a real
simulation (``run_comparison``, SimPy engine); the collapse is the learning model's, read
from the summary's ``t_collapse``; the margin is the one advise prices a setting with
(:func:`analysis.advise.evaluate.evaluate`). The learning rates sit 10 % either side of the
margin's boundary (margin 1.1 and 0.9)."""

from __future__ import annotations

import numpy as np
import pytest
from rolloutlab.analysis.advise.evaluate import collapse_margin, evaluate
from rolloutlab.sim.models.learning import LearningParams
from rolloutlab.sim.models.passrate import BetaPassRate
from rolloutlab.sim.models.rewards import RewardConfig, RewardTracker, reward_config
from rolloutlab.sim.models.staleness import StalenessParams, predict_eta_max
from rolloutlab.sim.pipelines.spec import parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.scenario import load_scenario
from rolloutlab.sim.studies.compare import plan_comparison, run_comparison

KINDS = ("sync", "one-step-off", "interval:3", "bounded:2", "partial:2", "async:2")
T, B = 12, 8


def simulate(scenario: str, spec: str, margin: float, K: int = 1) -> tuple[dict, float]:
    """The summary row of a T-step run of ``spec`` with K updates per batch at the lr whose
    margin is ``margin``, and the margin advise prices that setting with (``evaluate``)."""
    sc = load_scenario(scenario)
    rewards = reward_config(None, sc.pass_rate, sc.learning)
    assert rewards is not None and rewards.learning is not None
    pipe = parse_pipeline(spec)
    at_ref = collapse_margin(1e-6, pipe.max_staleness, T, rewards.learning, updates=K)
    lr = 1e-6 * at_ref / margin  # the margin is proportional to 1 / lr
    cfg = RunConfig(steps=T, prompts=B, seed=0, lr=lr, rewards=rewards, updates_per_batch=K)
    summary = run_comparison(plan_comparison(sc, ["static:4"], cfg, pipelines=[pipe])).summary
    setting = {
        "controller": "static:4",
        "prompts": B,
        "workers": sc.engine.n_workers,
        "max_num_seqs": sc.engine.max_num_seqs,
        "pipeline": spec,
        "lr": lr,
        "updates_per_batch": K,
    }
    priced = evaluate(setting, sc, rewards, T, target=None)
    return summary.row(0, named=True), priced["collapse_margin"]


@pytest.mark.parametrize("K", [1, 2, 4])
@pytest.mark.parametrize("margin", [0.9, 1.1])
@pytest.mark.parametrize("spec", KINDS)
def test_margin_below_one_exactly_where_the_simulated_run_collapses(spec, margin, K):
    row, got = simulate("longcot", spec, margin, K)
    assert got == pytest.approx(margin)
    assert row["staleness_max"] == parse_pipeline(spec).max_staleness  # the bound is reached
    assert (row["t_collapse"] is not None) == (got < 1.0), (spec, K, row["t_collapse"])


def test_async_margin_is_conservative_where_the_queue_keeps_staleness_below_its_bound():
    # gsm8k's short responses keep async:2's queue fresh (drop_oldest): no group is trained
    # 2 versions old, so the margin at the bound S_max = 2 is below 1 and the run does not
    # collapse; at the staleness the run reached, margin and simulation agree again.
    row, got = simulate("gsm8k", "async:2", 0.9)
    assert got < 1.0 and row["t_collapse"] is None and row["staleness_max"] == 1
    sc = load_scenario("gsm8k")
    learning = reward_config(None, sc.pass_rate, sc.learning).learning
    lr = 1e-6 * collapse_margin(1e-6, 2, T, learning) / 0.9
    assert collapse_margin(lr, row["staleness_max"], T, learning) > 1.0


def test_the_horizon_counts_every_update_of_a_step():
    # K = 2 on-policy updates per step for 300 steps: spans 1 and 2, and 600 updates of
    # drift. At eta = 0.05 the span-2 rule holds (0.1 < C_safe) but the drift 600 eta = 30
    # passes R_crit = 25: the margin must count K T updates to see it.
    lr = 5e-6
    p = LearningParams(kappa=1.0)
    margin = collapse_margin(lr, 0, 300, p, updates=2)
    tracker = RewardTracker(RewardConfig(BetaPassRate(0.6, 1.4), learning=p), 0, lr, 8, 2)
    assert tracker.model is not None
    for step in range(300):
        tracker.learn([np.array([1.0, 0.0])] * 8, step)
    assert margin < 1.0 and tracker.model.collapsed
    # counting T = 300 steps instead of K T = 600 updates would say no collapse
    assert float(predict_eta_max(StalenessParams(), 2, 300)) / (p.eta_ref * lr / p.lr_ref) > 1
