"""Tail batching's routing of prompts predicted long
(:mod:`sim.pipelines.long_round`): never before a prompt has been seen finishing, only
above ``F`` times the mean length seen, reported per step; off, nothing changes."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.pipelines.async_pipeline import PipelineSimulation, run_pipeline
from rolloutlab.sim.pipelines.long_round import ROUTE_COLUMNS, LongRound
from rolloutlab.sim.pipelines.spec import parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig

from tests.test_groupover import wide

ops = st.lists(
    st.one_of(
        st.tuples(st.just("obs"), st.integers(0, 11), st.integers(1, 500)),
        st.tuples(st.just("batch"), st.integers(1, 6), st.just(0)),
        st.tuples(st.just("park"), st.integers(0, 11), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops, st.floats(1.0, 3.0), st.integers(1, 4), st.sampled_from([None, 12]))
def test_routing_only_seen_prompts_above_f_times_the_mean(seq, F, B, dataset_size):
    """Replayed against an independent record of what was observed: a routed prompt has
    finished at least once before, its mean is the mean of its observed lengths and
    exceeds F x the mean of all observed lengths; it was not already queued; a batch
    holds what was asked (or B from the long round); the stream is consumed in order."""
    lr = LongRound(B, F, dataset_size)
    seen: dict[int, list[int]] = {}
    stream_pos = 0
    for t, (op, a, b) in enumerate(seq):
        if op == "obs":
            lr.observe(a, b)
            seen.setdefault(a, []).append(b)
        elif op == "park":
            lr.park(a)
        else:
            queued, n_events = list(lr.queue), len(lr.events)
            ids, n = lr.next_ids(a, float(t))
            assert len(ids) == n
            if len(queued) >= B:
                assert n == B and ids.tolist() == queued[:B] and len(lr.events) == n_events
                continue
            assert n == a
            new = lr.events[n_events:]
            drawn = ids.tolist() + [e.prompt_id for e in new]
            pos = np.arange(stream_pos, stream_pos + len(drawn))
            want = pos % dataset_size if dataset_size else pos
            assert sorted(drawn) == sorted(want.tolist())
            stream_pos += len(drawn)
            everything = [x for v in seen.values() for x in v]
            for e in new:
                assert e.prompt_id in seen and e.t == float(t)
                assert e.n == len(seen[e.prompt_id])
                assert e.mean == pytest.approx(np.mean(seen[e.prompt_id]))
                assert e.threshold == pytest.approx(F * np.mean(everything))
                assert e.mean > e.threshold
                assert e.prompt_id not in queued
            assert len(new) <= a
            assert lr.queue == queued + [e.prompt_id for e in new]
        assert len(set(lr.queue)) == len(lr.queue)  # a prompt waits once


def _run(spec: str, park: bool, dataset_size: int | None, seed: int):
    cfg = RunConfig(12, 6, seed, dataset_size=dataset_size)
    sim = PipelineSimulation(wide(), StaticG(4), cfg, parse_pipeline(spec, park=park), None)
    return (*sim.run(), sim.long)


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 50), st.booleans(), st.sampled_from([None, 18]))
def test_routing_that_never_fires_changes_nothing(seed, park, dataset_size):
    """route=F with an F no prompt can reach dispatches exactly what no routing does:
    identical rollout and step tables (but for the two route columns, 0 routed)."""
    base = "oversample:1.5:group=6/4"
    r0, s0, _, _ = _run(base, park, dataset_size, seed)
    r1, s1, _, long = _run(base + ":route=1e9", park, dataset_size, seed)
    assert long.events == [] and s1["routed_prompts"].to_list() == [0] * s1.height
    assert s0.select(ROUTE_COLUMNS).null_count().row(0) == (s0.height, s0.height)
    assert r0.equals(r1)
    assert s0.drop(ROUTE_COLUMNS).equals(s1.drop(ROUTE_COLUMNS))


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 50), st.booleans())
def test_routed_prompts_were_seen_finishing_and_are_reported(seed, park):
    """In a run: a routed prompt's ``n`` is the count of its rollouts that ran to their
    end (a cut group's finished ones too: ``response == would-be``) before it was routed
    (>= 1; finishing at the very dispatch time may count either way); the step table counts the routings of each step (dispatched while it ran)
    and its reason names them; routed prompts run later in a long round."""
    rollouts, steps, _, long = _run("oversample:1.5:group=6/4:route=1.2", park, 18, seed)
    ended = (pl.col("finish_reason") != "abort") | (
        pl.col("response_tokens") == pl.col("would_be_response_tokens")
    )
    done = rollouts.filter(ended)
    t_end = steps["t_end"].to_numpy()
    assert steps["routed_prompts"].sum() == sum(e.t <= t_end[-1] for e in long.events)
    for e in long.events:
        mine = done.filter(pl.col("prompt_id") == e.prompt_id)["t_finish"].to_numpy()
        assert 1 <= e.n and (mine < e.t).sum() <= e.n <= (mine <= e.t).sum()
    for row in steps.iter_rows(named=True):
        reason = row["route_reason"]
        assert (reason is None) == (row["routed_prompts"] == 0)
        if reason is not None:
            got = json.loads(reason)
            assert got["F"] == 1.2 and len(got["prompts"]) == row["routed_prompts"]
            assert all(p["mean"] > p["threshold"] for p in got["prompts"])


def test_a_repeating_dataset_routes_and_runs_the_long_round():
    """With prompts recurring (dataset 18, B = 6, 1.5x oversampling) and a per-prompt
    length effect, routing fires and routed prompts come back in a batch of B."""
    rollouts, steps, _, long = _run("oversample:1.5:group=6/4:route=1.2", False, 18, 3)
    assert steps["routed_prompts"].sum() > 0
    routed = {e.prompt_id for e in long.events}
    late = rollouts.filter(pl.col("t_submit") > min(e.t for e in long.events))
    assert routed & set(late["prompt_id"].to_list())


def test_route_option_parses_and_refuses_bad_values():
    p = parse_pipeline("oversample:1.25:group=12/8:route=1.5")
    assert p.route == 1.5 and parse_pipeline(p.spec) == p
    for bad, words in [
        ("oversample:1.25:route=0.5", "route=F needs oversample:R and a finite F >= 1"),
        ("sync:route=2", "route=F needs oversample:R"),
        ("oversample:1.25:route=inf", "finite F >= 1"),
        ("oversample:1.25:route=x", "option route must be a number"),
    ]:
        with pytest.raises(ValueError, match=words):
            parse_pipeline(bad)


def test_dataset_size_now_wraps_the_batch_pipelines_prompt_ids():
    """The batch-serial pipelines used to ignore --dataset-size (ids grew forever)."""
    rollouts, _, _ = run_pipeline(
        wide(), StaticG(2), RunConfig(6, 4, 0, dataset_size=8), parse_pipeline("oversample:1.5")
    )
    assert rollouts["prompt_id"].max() < 8
