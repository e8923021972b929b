"""DAPO dynamic sampling: what is trained, the abort rate against exact probabilities,
and the SimPy pipeline against the fast path."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from rolloutlab.sim.control.spec import parse_controller
from rolloutlab.sim.models.passrate import draw_correct
from rolloutlab.sim.models.reward_metrics import informative_prob
from rolloutlab.sim.pipelines.dynamic_sampling import (
    DEFAULT_MAX_GEN_BATCHES,
    MAX_ROUNDS,
    Collector,
    DynamicSampling,
    PromptStream,
)
from rolloutlab.sim.pipelines.sync import RunConfig, run_sync
from rolloutlab.sim.pipelines.sync_fast import run_sync_fast
from scipy import stats

from tests.engine_helpers import ds_config


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    p=st.floats(0.02, 0.98),
    G=st.integers(1, 6),
    B=st.integers(1, 6),
    F=st.floats(1.0, 3.0),
    k=st.integers(0, 3),
    refill=st.sampled_from(["batch", "missing"]),
    seed=st.integers(0, 100),
)
def test_never_a_homogeneous_group_never_more_than_B(tiny_scenario, p, G, B, F, k, refill, seed):
    if G == 1 and k == 0:
        k = 2  # G = 1 is never informative: unlimited rounds would never end
    rollouts, steps = run_sync_fast(
        tiny_scenario, parse_controller(f"static:{G}"), ds_config(p, B, F, k, refill, seed=seed)
    )
    groups = rollouts.group_by("step", "prompt_id").agg(pl.col("reward").n_unique().alias("u"))
    assert (groups["u"] > 1).all()  # every trained group is informative
    per_step = groups.group_by("step").len()
    assert (per_step["len"] <= B).all()
    kept = steps["kept_groups"].to_numpy()
    assert (kept <= B).all() and (steps["informative_groups"] >= steps["kept_groups"]).all()
    full = kept == B
    assert np.array_equal(~full, steps["dynamic_sampling_abort"].to_numpy())
    if k:
        assert (steps["gen_rounds"] <= k).all()
    expect = dict(zip(steps["step"].to_list(), kept.tolist()))
    assert all(expect[s] == n for s, n in per_step.iter_rows())


def _abort_prob(q: float, B: int, n1: int, k: int, refill: str) -> float:
    """Exact probability that k rounds keep fewer than B informative groups."""
    if refill == "batch":  # k rounds of n1 prompts: fewer than B informative in k n1 draws
        return float(stats.binom.cdf(B - 1, k * n1, q))
    # missing: state = groups still missing; round 1 draws n1, later rounds draw what is missing
    x = stats.binom.pmf(np.arange(n1 + 1), n1, q)
    missing = np.zeros(B + 1)
    for got, pr in enumerate(x):
        missing[B - min(got, B)] += pr
    for _ in range(k - 1):
        nxt = np.zeros(B + 1)
        for m, pr in enumerate(missing):
            nxt[m - np.arange(m + 1)] += pr * stats.binom.pmf(np.arange(m + 1), m, q)
        missing = nxt
    return float(1.0 - missing[0])


@pytest.mark.parametrize(
    "p,G,B,F,k,refill",
    [
        (0.1, 2, 4, 1.0, 2, "batch"),
        (0.1, 2, 4, 1.5, 3, "missing"),
        (0.05, 4, 3, 2.0, 1, "batch"),
        (0.9, 3, 5, 1.0, 3, "missing"),
    ],
)
def test_abort_rate_matches_exact_probability(p, G, B, F, k, refill):
    """Collector + keyed draws over 4000 independent steps vs exact enumeration."""
    ds, n_steps = DynamicSampling(F, k, refill), 4000
    stream, aborts = PromptStream(), 0
    for t in range(n_steps):
        col = Collector(B, ds)
        while n := col.next_count():
            ids = stream.take(n)
            col.add(draw_correct(11, t, ids, G, np.full(n, p)), n)
        aborts += col.abort
    q = float(informative_prob(p, G))
    exact = _abort_prob(q, B, math.ceil(F * B), k, refill)
    se = math.sqrt(exact * (1 - exact) / n_steps)
    assert abs(aborts / n_steps - exact) <= 4.5 * se + 1e-3, (aborts / n_steps, exact)


def test_abort_rate_of_the_pipeline(tiny_scenario):
    p, G, B, k = 0.1, 2, 3, 2
    _, steps = run_sync_fast(
        tiny_scenario, parse_controller("static:2"), ds_config(p, B, 1.0, k, "batch", steps=600)
    )
    exact = _abort_prob(float(informative_prob(p, G)), B, B, k, "batch")
    rate = steps["dynamic_sampling_abort"].mean()
    assert abs(rate - exact) <= 4.5 * math.sqrt(exact * (1 - exact) / 600)


def test_exact_abort_probability_by_brute_force():
    """The enumeration above against a direct sum over every outcome (B=2, k=2)."""
    q, B, n1 = 0.3, 2, 2
    brute = 0.0
    for x1 in range(n1 + 1):
        p1 = stats.binom.pmf(x1, n1, q)
        kept = min(x1, B)
        if kept == B:
            continue
        for x2 in range(B - kept + 1):
            if kept + x2 < B:
                brute += p1 * stats.binom.pmf(x2, B - kept, q)
    assert _abort_prob(q, B, n1, 2, "missing") == pytest.approx(brute)


def test_rounds_take_fresh_prompts_and_count_waste(tiny_scenario):
    cfg = ds_config(0.15, 4, 2.0, 0, "missing", steps=5)
    rollouts, steps = run_sync(tiny_scenario, parse_controller("static:4"), cfg)
    ids = rollouts.group_by("step", "prompt_id").len()["prompt_id"]
    assert ids.n_unique() == ids.len()  # no prompt trained twice: the stream only advances
    assert (steps["generated_groups"] >= steps["kept_groups"]).all()
    wasted = steps["generated_groups"] > steps["kept_groups"]
    assert ((steps["wasted_rollout_s"] > 0) == wasted).all()
    assert (steps["kept_groups"] == 4).all() and not steps["dynamic_sampling_abort"].any()


@pytest.mark.parametrize("refill,k", [("batch", 2), ("missing", 0)])
def test_fast_path_equals_simpy_with_dynamic_sampling(tiny_scenario, refill, k):
    cfg = ds_config(0.2, 3, 1.5, k, refill, steps=8, seed=3)
    r1, s1 = run_sync(tiny_scenario, parse_controller("sagc"), cfg)
    r2, s2 = run_sync_fast(tiny_scenario, parse_controller("sagc"), cfg)
    assert_frame_equal(r1, r2, check_exact=False, rel_tol=1e-9)
    assert_frame_equal(s1, s2, check_exact=False, rel_tol=1e-9)


def test_abort_with_nothing_kept_trains_nothing(tiny_scenario):
    cfg = ds_config(1.0, 2, 1.0, 2, "batch", steps=3)  # p = 1: every group homogeneous
    rollouts, steps = run_sync(tiny_scenario, parse_controller("static:4"), cfg)
    assert rollouts.height == 0
    assert steps["dynamic_sampling_abort"].all() and (steps["kept_groups"] == 0).all()
    assert (steps["train_time"] == 0).all() and (steps["gen_rounds"] == 2).all()


def test_bad_settings():
    with pytest.raises(ValueError, match="--gen-batch-factor"):
        DynamicSampling(0.5)
    with pytest.raises(ValueError, match="--max-gen-batches"):
        DynamicSampling(1.0, -1)
    with pytest.raises(ValueError, match="--refill"):
        DynamicSampling(1.0, 0, "half")
    with pytest.raises(ValueError, match="needs rewards"):
        RunConfig(dynamic=DynamicSampling())


def test_hopeless_unlimited_step_raises():
    col = Collector(2, DynamicSampling(1.0, 0, "batch"))
    with pytest.raises(RuntimeError, match="--max-gen-batches"):
        while n := col.next_count():
            col.add(np.zeros((n, 4), dtype=bool), n)


def test_the_default_cap_is_the_dapo_recipes_and_a_hopeless_step_aborts_there():
    """verl's DAPO recipe (recipe/dapo/run_dapo_qwen2.5_32b.sh) caps a step at
    max_num_gen_batches=10: so does the default, and a step whose groups are all
    homogeneous ends after 10 rounds as aborted, without an error."""
    assert DynamicSampling().max_gen_batches == DEFAULT_MAX_GEN_BATCHES == 10
    col, rounds = Collector(4, DynamicSampling()), 0
    while n := col.next_count():
        col.add(np.ones((n, 4), dtype=bool), n)
        rounds += 1
    assert rounds == 10 and col.abort and col.kept == 0


def test_an_unlimited_hopeless_step_stops_at_a_thousand_rounds_with_one_line():
    col, rounds = Collector(2, DynamicSampling(1.0, 0, "batch")), 0
    with pytest.raises(RuntimeError) as err:
        while n := col.next_count():
            col.add(np.zeros((n, 4), dtype=bool), n)
            rounds += 1
    assert rounds == MAX_ROUNDS == 1000
    assert "\n" not in str(err.value) and "1000 generation rounds kept 0 of 2" in str(err.value)
