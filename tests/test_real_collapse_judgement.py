"""A real run's collapse verdict (real.runners.collapse): one KL spike is not a collapse for
the whole-run judgement, a held-out accuracy that fell to a fraction of its best is."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.real.runners.collapse import CollapseConfig, judge_run, replay


def healthy_steps(n: int, kl_at: dict[int, float] | None = None) -> list[dict]:
    """``n`` steps of a learning run: reward 0.7, KL 0.1 (``kl_at`` overrides some steps)."""
    kl_at = kl_at or {}
    return [
        {"step": t, "reward_mean": 0.7, "kl": kl_at.get(t, 0.1), "loss": 0.1, "grad_norm": 1.0}
        for t in range(n)
    ]


def evals(*acc: tuple[int, float]) -> list[dict]:
    """``eval.jsonl`` rows from ``(step, accuracy)`` pairs."""
    return [{"step": s, "accuracy": a} for s, a in acc]


def test_one_kl_spike_fires_the_live_criterion_but_not_the_run_judgement():
    steps = healthy_steps(80, {64: 4.5})  # what a healthy static:4 digit-chain run showed
    assert replay(steps).failure == "kl"  # the live detector: at once (kl_patience 1)
    judged = judge_run(steps, evals((-1, 0.5), (39, 0.84), (79, 0.78)))
    assert not judged.collapsed and judged.failure == "none"


def test_a_kl_held_above_the_bound_for_patience_steps_is_a_collapse():
    steps = healthy_steps(40, {t: 3.0 for t in range(20, 40)})
    judged = judge_run(steps, evals((-1, 0.5), (39, 0.6)))
    assert judged.failure == "kl" and judged.t_collapse == 20 + CollapseConfig().patience


def test_held_out_accuracy_fallen_below_half_its_best_is_a_collapse():
    # lr 1e6 on 6 steps: reward 0 from step 1 on, too short for the reward's patience
    steps = [{"step": 0, "reward_mean": 0.38, "kl": 0.0, "loss": 0.2, "grad_norm": 1.0}] + [
        {"step": t, "reward_mean": 0.0, "kl": None, "loss": None, "grad_norm": None}
        for t in range(1, 6)
    ]
    assert not replay(steps).collapsed
    judged = judge_run(steps, evals((-1, 0.3125), (5, 0.0)))
    assert judged.failure == "heldout" and judged.t_collapse == 6


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8))
def test_the_held_out_criterion_fires_exactly_when_the_end_is_below_half_the_best(acc):
    rows = evals(*[(20 * i - 1, a) for i, a in enumerate(acc)])
    judged = judge_run(healthy_steps(20 * len(acc)), rows)
    best = max(acc)
    assert judged.collapsed == (best > 0.1 and acc[-1] < 0.5 * best)
