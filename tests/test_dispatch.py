"""Dispatch held at the engine (``shared``, ``deferred:T``) against dispatch at submit."""

from __future__ import annotations

from unittest import mock

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.engine.core import EngineConfig, Worker, generate
from rolloutlab.sim.engine.dispatch import parse_dispatch
from rolloutlab.sim.engine.schedule import assign_workers
from rolloutlab.sim.models.cost import LinearCost
from rolloutlab.sim.models.lengths import LognormalLengths
from rolloutlab.sim.pipelines.async_pipeline import run_pipeline
from rolloutlab.sim.pipelines.spec import parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.scenario import Scenario

ONE_S_PER_TOKEN = LinearCost(a_s=1.0, b_s=0.0, c_s=0.0)


def makespan(lengths: np.ndarray, workers: int, dispatch: str, slots: int = 1) -> float:
    """Makespan (s) of one phase, prompts of 0 tokens, 1 s per decode iteration."""
    cfg = EngineConfig(n_workers=workers, max_num_seqs=slots, dispatch=dispatch)
    b = generate(lengths, np.zeros(len(lengths), dtype=np.int64), ONE_S_PER_TOKEN, cfg)
    return float(b.t_finish.max())


def test_requests_tied_at_submit_wait_behind_long_ones():
    """Issue fault: 2 workers, max_num_seqs = 1, 1 s per token, groups (10, 1) x 3.
    Round-robin and least-loaded (loads at submit) put the three 10s on one worker: 30 s.
    A shared queue is list scheduling: at most sum/K + max = 33/2 + 10 = 26.5 s; by hand
    21 s (w0: 10, then 1, then 10 at t = 11; w1: 1, 10, 1)."""
    groups = np.array([[10, 1]] * 3)
    assert makespan(groups, 2, "round_robin") == 30.0
    assert makespan(groups, 2, "least_loaded") == 30.0
    assert makespan(groups, 2, "shared") == 21.0 <= 26.5


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4), st.lists(st.integers(1, 40), min_size=1, max_size=24))
def test_shared_queue_obeys_the_list_scheduling_bounds(K, lengths):
    """K single-slot workers, iteration cost independent of the batch (Graham 1969):
    max(sum/K, max) <= makespan <= sum/K + max."""
    L = np.array(lengths)[:, None]
    m = makespan(L, K, "shared")
    assert max(L.sum() / K, L.max()) <= m + 1e-9
    assert m <= L.sum() / K + L.max() + 1e-9
    # one FIFO queue: a single-slot worker takes the next request the moment it frees,
    # so requests start in submission order
    cfg = EngineConfig(n_workers=K, max_num_seqs=1, dispatch="shared")
    b = generate(L, np.zeros(len(L), dtype=np.int64), ONE_S_PER_TOKEN, cfg)
    assert (np.diff(b.t_first_token) >= 0).all()


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4), st.lists(st.integers(1, 30), min_size=1, max_size=20))
def test_deferred_keeps_at_most_t_waiting(T, slots, lengths):
    """With deferred:T a worker never holds more than slots + T requests, so with a
    backlog it runs full and every request is served; shared is deferred with T = 0."""
    L = np.array(lengths)[:, None]
    for spec, extra in ((f"deferred:{T}", T), ("shared", 0)):
        cfg = EngineConfig(n_workers=2, max_num_seqs=slots, dispatch=spec)
        most = []
        enqueue = Worker.enqueue

        def watched(self, batch, idx, _enqueue=enqueue, _most=most):
            _enqueue(self, batch, idx)
            _most.append(self.outstanding)

        with mock.patch.object(Worker, "enqueue", watched):
            b = generate(L, np.zeros(len(L), dtype=np.int64), ONE_S_PER_TOKEN, cfg)
        assert not np.isnan(b.t_finish).any() and (b.worker >= 0).all()
        assert max(most) <= slots + extra
        if len(L) >= 2 * (slots + extra):  # a backlog: some worker is filled to its limit
            assert max(most) == slots + extra
    one = makespan(L, 1, "shared", slots)
    assert one == makespan(L, 1, f"deferred:{T}", slots)  # one worker: same order, same slots


def tiny() -> Scenario:
    return Scenario(
        name="tiny",
        prompt_tokens=16,
        lengths=LognormalLengths(
            mu=3.0, sigma_prompt=0.5, sigma_within=0.7, max_response_length=120
        ),
        cost=LinearCost(a_s=0.01, b_s=1e-4, c_s=1e-6, learner_const_s=0.3, sync_s=0.1),
        engine=EngineConfig(n_workers=2, max_num_seqs=3, dispatch="shared"),
    )


@settings(max_examples=15, deadline=None)
@given(
    st.sampled_from(["one-step-off", "bounded:2", "partial:1", "oversample:1.5", "groupover:5/3"]),
    st.integers(1, 4),
    st.integers(1, 5),
    st.integers(0, 1000),
)
def test_pipelines_account_for_every_rollout_with_a_shared_queue(spec, B, steps, seed):
    """Aborts reach requests still held at the engine (over-sampling with 3 slots)."""
    rollouts, _, ledger = run_pipeline(
        tiny(), StaticG(3), RunConfig(steps, B, seed), parse_pipeline(spec)
    )
    assert ledger.dispatched == (
        ledger.consumed + ledger.dropped + ledger.aborted + ledger.ready + ledger.in_flight
    )
    assert rollouts.select("prompt_id", "sample_idx").is_unique().all()
    assert ledger.consumed == steps * B * 3
    aborted = rollouts.filter(pl.col("finish_reason") == "abort")
    assert (aborted["t_finish"] >= aborted["t_submit"]).all()


def test_bad_dispatch_specs():
    for bad in ("nope", "deferred", "deferred:0", "deferred:-1", "deferred:x", "shared:2"):
        with pytest.raises(ValueError, match="dispatch"):
            parse_dispatch(bad)
    with pytest.raises(ValueError, match="dispatch"):
        EngineConfig(dispatch="deferred:0")
    with pytest.raises(ValueError, match="no assignment at submit"):
        assign_workers(np.zeros(3), EngineConfig(dispatch="shared"))
