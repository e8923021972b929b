"""Dynamic sampling in the asynchronous pipelines (sim.pipelines.async_dynamic)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rolloutlab.sim.control.spec import parse_controller
from rolloutlab.sim.models.reward_metrics import informative_prob
from rolloutlab.sim.pipelines.async_pipeline import run_pipeline
from rolloutlab.sim.pipelines.spec import parse_pipeline
from scipy import stats

from tests.engine_helpers import ds_config


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pipe=st.sampled_from(["sync", "one-step-off", "interval:2", "bounded:2", "partial:1"]),
    p=st.floats(0.05, 0.95),
    G=st.integers(2, 5),
    B=st.integers(1, 5),
    F=st.floats(1.0, 2.5),
    k=st.integers(0, 3),
    refill=st.sampled_from(["batch", "missing"]),
    seed=st.integers(0, 50),
)
def test_invariants(tiny_scenario, pipe, p, G, B, F, k, refill, seed):
    pc = parse_pipeline(pipe)
    rollouts, steps, ledger = run_pipeline(
        tiny_scenario, parse_controller(f"static:{G}"), ds_config(p, B, F, k, refill, seed=seed), pc
    )
    trained = rollouts.filter(pl.col("finish_reason") != "abort")
    groups = trained.group_by("step", "prompt_id").agg(pl.col("reward").n_unique().alias("u"))
    assert (groups["u"] > 1).all()  # never a homogeneous group trained
    per_step = groups.group_by("step").len()
    assert (per_step["len"] <= B).all()
    assert (steps["kept_groups"] <= B).all()
    assert np.array_equal(
        steps["dynamic_sampling_abort"].to_numpy(), (steps["kept_groups"] < B).to_numpy()
    )
    if k:
        assert (steps["gen_rounds"] <= k).all()
    assert (trained["learner_version"] - trained["policy_version"] <= pc.max_staleness).all()
    assert ledger.dispatched == (
        ledger.consumed
        + ledger.dropped
        + ledger.aborted
        + ledger.filtered
        + ledger.ready
        + ledger.in_flight
    )


def test_sync_kind_abort_rate_matches_exact_probability(tiny_scenario):
    """Batch-serial with no lead: each step draws k whole batches at most, as the
    synchronous pipeline does, so P(abort) = BinomCDF(B - 1; k B, q)."""
    p, G, B, k, n = 0.1, 2, 3, 2, 400
    _, steps, _ = run_pipeline(
        tiny_scenario,
        parse_controller("static:2"),
        ds_config(p, B, 1.0, k, "batch", steps=n),
        parse_pipeline("sync"),
    )
    exact = float(stats.binom.cdf(B - 1, k * B, informative_prob(p, G)))
    rate = steps["dynamic_sampling_abort"].mean()
    assert abs(rate - exact) <= 4.5 * math.sqrt(exact * (1 - exact) / n)


def test_filtered_groups_are_counted_not_written(tiny_scenario):
    rollouts, steps, ledger = run_pipeline(
        tiny_scenario,
        parse_controller("static:3"),
        ds_config(0.3, 4, 1.5, 0, "missing", steps=5),
        parse_pipeline("one-step-off"),
    )
    filtered_groups = int((steps["generated_groups"] - steps["kept_groups"]).sum())
    assert ledger.filtered == 3 * filtered_groups > 0
    assert (steps["wasted_rollout_s"] > 0).any()
    assert rollouts.filter(pl.col("finish_reason") != "abort").height == 5 * 4 * 3


def test_oversample_with_dynamic_sampling_is_refused(tiny_scenario):
    with pytest.raises(ValueError, match="over-samples already"):
        run_pipeline(
            tiny_scenario,
            parse_controller("static:2"),
            ds_config(0.3, 2, 1.5, 0, "batch"),
            parse_pipeline("oversample:1.5"),
        )
