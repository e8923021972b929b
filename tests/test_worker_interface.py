"""One worker interface: both workers (slots only, paged KV) pause, resume and abort the
same way, and every pipeline runs on both."""

from __future__ import annotations

from collections import Counter
from unittest import mock

import numpy as np
import polars as pl
import simpy
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.engine.batch import Batch
from rolloutlab.sim.engine.core import Engine, EngineConfig
from rolloutlab.sim.engine.prefix_cache import PrefixCache
from rolloutlab.sim.models.cost import ConstantCost, LinearCost
from rolloutlab.sim.models.lengths import LognormalLengths
from rolloutlab.sim.pipelines.async_pipeline import run_pipeline
from rolloutlab.sim.pipelines.spec import parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.scenario import Scenario
from rolloutlab.sim.trace.metrics import consumed, staleness

from rolloutlab.cli import main
from tests.engine_helpers import dyadic_costs

NO_PRESSURE = 10**6  # KV blocks: the paged worker, but nothing is ever preempted


@st.composite
def control_plan(draw):
    """Dyadic costs, a config, and a list of (wait, action, payload) driving one engine."""
    cost = draw(dyadic_costs(min_a=1))
    cfg = dict(
        n_workers=draw(st.integers(1, 2)),
        max_num_seqs=draw(st.integers(1, 4)),
        dispatch=draw(st.sampled_from(["round_robin", "group", "least_loaded"])),
        prefix_caching=draw(st.booleans()),
    )
    action = st.one_of(
        st.tuples(
            st.just("submit"),
            st.lists(
                st.tuples(st.integers(0, 3), st.integers(0, 6), st.integers(1, 12)),
                min_size=1,
                max_size=6,
            ),
        ),
        st.tuples(st.just("pause"), st.integers(0, 12)),
        st.tuples(
            st.just("abort"),
            st.tuples(st.integers(0, 9), st.lists(st.integers(0, 9), min_size=1, max_size=4)),
        ),
    )
    plan = draw(st.lists(st.tuples(st.integers(0, 12), action), min_size=1, max_size=8))
    return cost, cfg, plan


def drive(cost: LinearCost, config: EngineConfig, plan) -> list[Batch]:
    """Run ``plan`` (waits in quarter seconds) on a fresh engine; return its batches."""
    env = simpy.Environment()
    engine = Engine(env, cost, config)
    batches: list[Batch] = []

    def process():
        for wait, (kind, payload) in plan:
            yield env.timeout(wait / 4)
            if kind == "submit":
                keys, prompts, lengths = map(np.array, zip(*payload))
                batches.append(engine.submit(keys, prompts, lengths, on_finish=lambda *a: None))
            elif kind == "pause":
                yield engine.pause()
                yield env.timeout(payload / 4)
                engine.resume()
            elif batches:
                b = batches[payload[0] % len(batches)]
                engine.abort(b, [i % len(b.response_tokens) for i in payload[1]])

    env.process(process())
    env.run()
    return batches


@settings(max_examples=60, deadline=None)
@given(control_plan())
def test_paged_worker_pauses_and_aborts_like_the_plain_worker(case):
    """Without KV pressure the paged worker is the plain one: same times, same aborts,
    under any interleaving of submits, pauses and aborts (dyadic costs: exact)."""
    cost, cfg, plan = case
    plain = drive(cost, EngineConfig(**cfg), plan)
    paged = drive(cost, EngineConfig(**cfg, kv_blocks=NO_PRESSURE), plan)
    for a, b in zip(plain, paged, strict=True):
        for field in ("worker", "t_first_token", "t_finish", "aborted", "abort_tokens"):
            assert np.array_equal(getattr(a, field), getattr(b, field), equal_nan=True), field
        assert a.remaining == b.remaining == 0  # every request finished or was aborted


def test_abort_during_a_chunked_prefill_frees_the_prompt_for_its_group_mate():
    """Two samples of one 16-token prompt, token budget 4, 1 s iterations: sample 0 is
    admitted and prefills 4 tokens per iteration while sample 1 waits for that prefill
    (prefix caching). Aborting sample 0 at t = 1.5 (at the boundary t = 2, 8 tokens in)
    must discard its half-computed prompt: sample 1 is admitted at t = 2, prefills all 16
    tokens (t = 2..6, first token at 6) and decodes 3 tokens: finished at 8."""
    env = simpy.Environment()
    cfg = EngineConfig(max_num_seqs=2, kv_blocks=64, block_size=4, max_num_batched_tokens=4)
    engine = Engine(env, ConstantCost(iter_s=1.0), cfg)
    batch = engine.submit(np.array([7, 7]), np.array([16, 16]), np.array([3, 3]), lambda *a: None)

    def aborter():
        yield env.timeout(1.5)
        engine.abort(batch, [0])

    env.process(aborter())
    env.run()
    assert batch.aborted.tolist() == [True, False]
    assert batch.abort_tokens.tolist() == [0, 0]
    assert batch.t_finish.tolist() == [2.0, 8.0]
    assert batch.t_first_token.tolist() == [2.0, 6.0]


def scenario(paged: bool, kv_extra: int, token_budget: int | None) -> Scenario:
    """Two workers of 4 slots; with ``paged`` a KV cache of blocks of 4 tokens that just
    fits the longest request plus ``kv_extra`` blocks (preemption happens)."""
    engine = EngineConfig(n_workers=2, max_num_seqs=4)
    if paged:
        engine = EngineConfig(
            n_workers=2,
            max_num_seqs=4,
            block_size=4,
            kv_blocks=-(-(8 + 24 - 1) // 4) + kv_extra,
            max_num_batched_tokens=token_budget,
        )
    return Scenario(
        name="tiny-kv" if paged else "tiny",
        prompt_tokens=8,
        lengths=LognormalLengths(
            mu=2.5, sigma_prompt=0.5, sigma_within=0.7, max_response_length=24
        ),
        cost=LinearCost(
            a_s=0.01,
            b_s=1e-3,
            c_s=1e-4,
            prefill_s_per_token=1e-4,
            learner_const_s=0.05,
            sync_s=0.01,
        ),
        engine=engine,
    )


class EventLog:
    """Counts every finish and abort a batch records, and the KV cache's peak use."""

    def __init__(self):
        self.finished: Counter = Counter()
        self.aborted: Counter = Counter()
        self.batches: dict[int, Batch] = {}
        self.over_capacity = 0
        self._finished, self._abort, self._alloc = (
            Batch.finished,
            Batch.record_abort,
            PrefixCache.alloc,
        )

    def patches(self):
        log = self

        def finished(batch, i, t):
            log.batches[id(batch)] = batch
            log.finished[(id(batch), i)] += 1
            log._finished(batch, i, t)

        def record_abort(batch, i, t, tokens):
            log.batches[id(batch)] = batch
            log.aborted[(id(batch), i)] += 1
            log._abort(batch, i, t, tokens)

        def alloc(cache, n_blocks):
            log._alloc(cache, n_blocks)
            log.over_capacity += cache.used + cache.cached_blocks > cache.cap

        return (
            mock.patch.object(Batch, "finished", finished),
            mock.patch.object(Batch, "record_abort", record_abort),
            mock.patch.object(PrefixCache, "alloc", alloc),
        )


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from(
        ["sync", "one-step-off", "interval:2", "bounded:1", "bounded:2", "partial:1"]
        + ["partial:2", "oversample:1.5"]
    ),
    st.sampled_from(["separate", "colocated"]),
    st.booleans(),
    st.integers(0, 6),
    st.one_of(st.none(), st.integers(4, 16)),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(0, 1000),
)
def test_every_pipeline_on_both_workers_keeps_its_invariants(
    spec, placement, paged, kv_extra, budget, B, G, steps, seed
):
    pc = parse_pipeline(spec, placement)
    log = EventLog()
    p1, p2, p3 = log.patches()
    with p1, p2, p3:
        rollouts, step_df, ledger = run_pipeline(
            scenario(paged, kv_extra, budget), StaticG(G), RunConfig(steps, B, seed), pc
        )
    # each request finishes or is aborted exactly once, never both
    assert max(log.finished.values(), default=1) == 1 and max(log.aborted.values(), default=1) == 1
    assert not set(log.finished) & set(log.aborted)
    for bid, batch in log.batches.items():
        ended = {i for (b, i) in list(log.finished) + list(log.aborted) if b == bid}
        assert ended == set(np.flatnonzero(~np.isnan(batch.t_finish)).tolist())
        assert batch.aborted.sum() == sum(1 for (b, _) in log.aborted if b == bid)
    assert ledger.dispatched == (
        ledger.consumed + ledger.dropped + ledger.aborted + ledger.ready + ledger.in_flight
    )
    # the KV cache never holds more blocks than it has
    assert log.over_capacity == 0
    # times are monotone: per rollout, and learner steps one after the other
    t = rollouts.select("t_submit", "t_first_token", "t_finish").to_numpy()
    # up to one rounding step: a 1-token response's first token and finish come from two
    # sums of the same iteration times (found: 0.5385000000000001 > 0.5385, paged, sync)
    eps = 1e-9 * np.maximum(1.0, np.abs(t).max())
    assert (t[:, 0] <= t[:, 1] + eps).all() and (t[:, 1] <= t[:, 2] + eps).all()
    assert (step_df["t_start"] <= step_df["t_end"]).all()
    assert (np.diff(step_df["t_end"].to_numpy()) > 0).all()
    # staleness within the pipeline's bound; every step trains B full groups
    used = consumed(rollouts)
    assert used.height == steps * B * G == ledger.consumed
    assert ((s := staleness(used)) >= 0).all() and (s <= pc.max_staleness).all()


def test_async_pipeline_runs_on_the_paged_kv_engine(tmp_path):
    """Regression: `sim --model ... --gpu ... --pipeline one-step-off` crashed with
    AttributeError: 'PagedWorker' object has no attribute 'hold'."""
    out = tmp_path / "out"
    args = ["sim", "--model", "qwen2.5-3b", "--gpu", "h100", "--pipeline", "one-step-off"]
    args += ["--steps", "2", "--prompts", "4", "--controller", "static:4", "--out", str(out)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    summary = pl.read_csv(out / "summary.csv")
    assert summary["pipeline"].to_list() == ["one-step-off"]
    assert summary["rollouts"].to_list() == [2 * 4 * 4]
