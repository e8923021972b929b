"""Metric functions against hand-computed values and brute-force references."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.trace.metrics import (
    busy_union_s,
    phase_means,
    run_summary,
    slot_idle_fraction,
    step_metrics,
    straggler_event,
    straggler_ratio,
)


def test_straggler_ratio_pools_ragged_groups():
    assert straggler_ratio([[1, 2], [3, 4, 10]]) == 10 / 3
    assert straggler_event([[1, 1, 1, 5]], tau=4.0)
    assert not straggler_event([[1, 1, 1, 4]], tau=4.0)
    with pytest.raises(ValueError):
        straggler_ratio([[]])


def test_slot_idle_fraction_by_hand():
    # finishes at 1, 2, 4 s: idle slot-seconds 3 + 2 + 0 over 3 * 4
    assert slot_idle_fraction(np.array([1.0, 2.0, 4.0])) == pytest.approx(5 / 12)
    assert slot_idle_fraction(np.array([3.0, 3.0])) == 0.0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), min_size=1, max_size=12))
def test_busy_union_matches_unit_grid(intervals):
    starts = np.array([s for s, _ in intervals], dtype=float)
    ends = starts + np.array([d for _, d in intervals], dtype=float)
    grid = np.zeros(80, dtype=bool)
    for s, e in zip(starts.astype(int), ends.astype(int)):
        grid[s:e] = True
    assert busy_union_s(starts, ends) == pytest.approx(grid.sum())


def _rows(spec):
    """Rollout rows from (worker, t_first, t_finish, length) tuples, one step."""
    n = len(spec)
    return pl.DataFrame(
        {
            "run_id": ["r"] * n,
            "step": [0] * n,
            "prompt_id": list(range(n)),
            "sample_idx": [0] * n,
            "group_size": [1] * n,
            "policy_version": [0] * n,
            "learner_version": [0] * n,
            "prompt_tokens": [5] * n,
            "response_tokens": [s[3] for s in spec],
            "finish_reason": ["length" if s[3] == 100 else "stop" for s in spec],
            "worker": [s[0] for s in spec],
            "t_submit": [0.0] * n,
            "t_first_token": [s[1] for s in spec],
            "t_finish": [s[2] for s in spec],
        }
    )


def test_step_metrics_by_hand():
    df = _rows([(0, 1.0, 10.0, 100), (0, 1.0, 4.0, 20), (1, 1.0, 2.0, 10)])
    m = step_metrics(df, tau=4.0, n_workers=3).row(0, named=True)
    assert m["makespan_s"] == 10.0
    # worker 0 busy [1, 10] -> idle 1; worker 1 busy [1, 2] -> idle 9; worker 2 idle 10
    assert m["device_idle_s"] == pytest.approx(20.0)
    assert m["slot_idle_frac"] == pytest.approx((0 + 6 + 8) / 30)
    assert m["straggler_ratio"] == 5.0 and m["straggler"]
    assert m["response_length/clip_ratio"] == pytest.approx(1 / 3)


def test_run_summary(tiny_scenario):
    from rolloutlab.sim.control.controllers import StaticG
    from rolloutlab.sim.pipelines.sync import RunConfig, run_sync

    rollouts, steps = run_sync(tiny_scenario, StaticG(4), RunConfig(steps=4, prompts=3))
    s = run_summary(rollouts, steps, tau=3.0)
    assert s["steps"] == 4 and s["rollouts"] == 4 * 3 * 4 and s["mean_G"] == 4
    gen = (steps["gen_time"] + steps["train_time"] + steps["sync_time"]).sum()
    assert s["wall_clock_s"] == pytest.approx(gen)
    assert s["tokens_per_s"] == pytest.approx(rollouts["response_tokens"].sum() / gen)


@st.composite
def rollout_tables(draw):
    """Random multi-step rollout tables: several workers, overlapping intervals, some caps."""
    n = draw(st.integers(1, 40))
    rows = draw(
        st.lists(
            st.tuples(
                st.integers(0, 3),
                st.integers(0, 2),
                st.floats(0, 50),
                st.floats(0, 30),
                st.floats(0, 5),
                st.integers(0, 120),
            ),
            min_size=n,
            max_size=n,
        )
    )
    df = pl.DataFrame(
        {
            "run_id": ["r"] * n,
            "step": [r[0] for r in rows],
            "prompt_id": list(range(n)),
            "sample_idx": [0] * n,
            "group_size": [r[1] + 1 for r in rows],
            "policy_version": [0] * n,
            "learner_version": [0] * n,
            "prompt_tokens": [5] * n,
            "response_tokens": [r[5] for r in rows],
            "finish_reason": ["length" if r[5] == 120 else "stop" for r in rows],
            "worker": [r[1] for r in rows],
            "t_submit": [r[2] for r in rows],
            "t_first_token": [r[2] + r[4] for r in rows],
            "t_finish": [r[2] + r[4] + r[3] for r in rows],
        }
    )
    return df, draw(st.sampled_from([None, 3, 5])), draw(st.floats(1.0, 6.0))


@settings(max_examples=150, deadline=None)
@given(rollout_tables())
def test_step_metrics_equal_the_per_step_definitions(table):
    """The vectorised table against the scalar definitions (docs/metrics.md), step by step."""
    df, n_workers, tau = table
    got = step_metrics(df, tau=tau, n_workers=n_workers, group_share=True)
    assert "group_straggler_share" not in step_metrics(df, tau=tau).columns
    assert got["step"].to_list() == sorted(set(df["step"].to_list()))
    for row in got.iter_rows(named=True):
        s = df.filter(pl.col("step") == row["step"])
        t0, t1 = s["t_submit"].min(), s["t_finish"].max()
        L = s["response_tokens"].to_numpy()
        idle = sum(
            max(
                t1 - t0 - busy_union_s(w["t_first_token"].to_numpy(), w["t_finish"].to_numpy()), 0.0
            )
            for _, w in s.group_by("worker")
        )
        if n_workers is not None:
            idle += max(n_workers - s["worker"].n_unique(), 0) * (t1 - t0)
        ratio = L.max() / np.median(L) if np.median(L) > 0 else float("inf")
        assert row["n_rollouts"] == s.height and row["makespan_s"] == pytest.approx(t1 - t0)
        assert row["device_idle_s"] == pytest.approx(idle, abs=1e-9)
        assert row["slot_idle_frac"] == pytest.approx(
            slot_idle_fraction(s["t_finish"].to_numpy() - t0), abs=1e-12
        )
        assert row["straggler_ratio"] == pytest.approx(ratio) and row["straggler"] == (ratio > tau)
        assert row["response_length/clip_ratio"] == pytest.approx(float(np.mean(L == 120)))
        assert row["response_tokens"] == L.sum() and row["group_size"] == s["group_size"].max()
        groups = [g["response_tokens"].to_numpy() for _, g in s.group_by("prompt_id")]
        straggling = [
            (g.max() > 0 and np.median(g) == 0)
            or (np.median(g) > 0 and g.max() / np.median(g) > tau)
            for g in groups
        ]
        assert row["group_straggler_share"] == pytest.approx(float(np.mean(straggling)))


def test_phase_means_are_per_run_never_pooled_over_runs():
    # two runs of a study by hand: G 4 steps cost 10 s reward wait, G 16 steps 90 s; the
    # pooled mean (50 s) is neither run's cost
    steps = pl.DataFrame(
        {"run_id": ["static:4", "static:16", "static:4", "static:16"],
         "t_start": [0.0, 0.0, 30.0, 150.0], "t_end": [30.0, 150.0, 70.0, 300.0],
         "gen_time": [8.0, 20.0, 12.0, 24.0], "train_time": [10.0, 38.0, 10.0, 34.0],
         "sync_time": [2.0, 2.0, 2.0, 2.0], "reward_wait_s": [10.0, 90.0, 10.0, 90.0],
         "periodic_s": [0.0, 0.0, 6.0, 0.0]}
    )  # fmt: skip
    got = phase_means(steps)
    assert got["run_id"].to_list() == ["static:4", "static:16"]  # first-appearance order
    assert got.row(0, named=True) == {"run_id": "static:4", "steps": 2, "step_s": 35.0,
        "gen_s": 10.0, "train_s": 10.0, "sync_s": 2.0, "reward_wait_s": 10.0, "periodic_s": 3.0}  # fmt: skip
    assert got.row(1, named=True)["reward_wait_s"] == 90.0
    assert got.row(1, named=True)["step_s"] == 150.0
    # a step table without priced phases has no such columns: none is made up
    assert phase_means(steps.drop("reward_wait_s", "periodic_s")).columns == [
        "run_id", "steps", "step_s", "gen_s", "train_s", "sync_s"]  # fmt: skip
