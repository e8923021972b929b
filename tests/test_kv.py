"""The paged engine: KV blocks, preemption by recompute, chunked prefill; closed form
against the per-iteration loop, and its invariants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.engine.core import Engine, EngineConfig, generate
from rolloutlab.sim.models.cost import ConstantCost, LinearCost

from tests.reference.kv_loop import paged_reference


@st.composite
def paged_case(draw, unlimited: bool = False):
    B, G = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    lengths = np.array(draw(st.lists(st.integers(1, 40), min_size=B * G, max_size=B * G))).reshape(
        B, G
    )
    prompts = np.array(draw(st.lists(st.integers(0, 30), min_size=B, max_size=B)))
    cost = LinearCost(
        a_s=draw(st.integers(0, 8)) / 8,
        b_s=draw(st.integers(0, 8)) / 16,
        c_s=draw(st.integers(0, 8)) / 64,
        prefill_s_per_token=draw(st.integers(0, 4)) / 32,
    )
    bs, ms = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    least = max(1, *(-(-(int(p) + int(row.max()) - 1) // bs) for p, row in zip(prompts, lengths)))
    budget = None if unlimited else draw(st.one_of(st.none(), st.integers(ms, ms + 24)))
    chunked = unlimited or budget is None or draw(st.booleans())
    if not chunked:  # (as vLLM: without chunking the budget holds the longest sequence)
        budget = max(budget, int(prompts.max() + lengths.max()))
    cfg = EngineConfig(
        n_workers=draw(st.integers(1, 3)),
        max_num_seqs=ms,
        dispatch=draw(st.sampled_from(["round_robin", "group", "least_loaded"])),
        prefix_caching=draw(st.booleans()),
        block_size=bs,
        kv_blocks=None if unlimited else least + draw(st.integers(0, 12)),
        max_num_batched_tokens=budget,
        chunked_prefill=chunked,
        recompute_partial_block=not unlimited and draw(st.booleans()),
    )
    return lengths, prompts, cost, cfg


@settings(max_examples=150, deadline=None)
@given(paged_case(), st.booleans())
def test_paged_closed_form_equals_reference_loop_exactly(case, exclusive):
    lengths, prompts, cost, cfg = case
    batch = generate(lengths, prompts, cost, cfg, exclusive=exclusive)
    ref = paged_reference(lengths, prompts, cost, cfg)  # asserts KV use <= capacity each iteration
    assert np.array_equal(batch.t_finish, ref.times["t_finish"])
    assert np.array_equal(batch.t_first_token, ref.times["t_first_token"])
    assert np.array_equal(batch.preemptions, ref.preemptions)


@settings(max_examples=100, deadline=None)
@given(paged_case())
def test_every_request_finishes_once_and_kv_stays_within_capacity(case):
    lengths, prompts, cost, cfg = case
    import simpy

    env = simpy.Environment()
    engine = Engine(env, cost, cfg)
    G = lengths.shape[1]
    finished = []
    batch = engine.submit(
        np.repeat(np.arange(len(prompts)), G),
        np.repeat(prompts, G),
        lengths.ravel(),
        on_finish=lambda b, i, t: finished.append(i),
    )
    env.run(until=batch.done)
    assert sorted(finished) == list(range(lengths.size))  # exactly once each
    assert np.all(batch.t_first_token <= batch.t_finish)
    assert sum(w.preemptions for w in engine.workers) == batch.preemptions.sum()
    for w in engine.workers:
        assert w.max_kv_blocks_used <= cfg.kv_blocks
        assert w.cache.used == 0 and not w.running and not w.waiting
    ref = paged_reference(lengths, prompts, cost, cfg)
    assert [w.max_kv_blocks_used for w in engine.workers] == ref.max_kv_blocks_used.tolist()
    # a closed-form boundary covers at least one iteration of the per-iteration loop
    assert all(w.boundaries <= it for w, it in zip(engine.workers, ref.features[:, 0]))


@settings(max_examples=100, deadline=None)
@given(paged_case(unlimited=True))
def test_paged_worker_without_pressure_equals_plain_worker(case):
    lengths, prompts, cost, cfg = case
    plain = generate(lengths, prompts, cost, cfg)
    paged = generate(lengths, prompts, cost, EngineConfig(**{**cfg.__dict__, "kv_blocks": 10**9}))
    assert np.array_equal(plain.t_finish, paged.t_finish)
    assert np.array_equal(plain.t_first_token, paged.t_first_token)
    assert paged.preemptions.sum() == 0


@pytest.mark.parametrize("exclusive", [True, False])
def test_long_kv_bound_run_equals_reference_loop_exactly(exclusive):
    # Beyond the hypothesis cases' sizes: 16-token blocks, hundreds of tokens per request,
    # a cache that keeps 24 sequences preempting for most of the run (every phase of the
    # incremental bookkeeping in use, several block cycles per segment), chunked prefill.
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 400, size=(12, 4))
    prompts = rng.integers(0, 90, size=12)
    cost = LinearCost(a_s=1 / 8, b_s=1 / 64, c_s=1 / 1024, prefill_s_per_token=1 / 256)
    cfg = EngineConfig(max_num_seqs=24, kv_blocks=160, max_num_batched_tokens=96)
    batch = generate(lengths, prompts, cost, cfg, exclusive=exclusive)
    ref = paged_reference(lengths, prompts, cost, cfg)
    assert ref.preemptions.sum() > 20  # (the case is KV-bound)
    assert np.array_equal(batch.t_finish, ref.times["t_finish"])
    assert np.array_equal(batch.t_first_token, ref.times["t_first_token"])
    assert np.array_equal(batch.preemptions, ref.preemptions)


def test_preemption_by_recompute_by_hand():
    # block 4 tokens, 3 blocks; A and B, no prompt, 9 tokens each. Iteration k (both
    # have g = k) needs ceil(k / 4) blocks each: at k = 5 both need 2 (4 > 3), so B, the
    # latest admitted, is preempted with 5 tokens; A runs alone to the end (t = 9), then
    # B is re-admitted, recomputes its 5 tokens as prefill, and decodes 4 more.
    cost = LinearCost(a_s=1.0, b_s=0, c_s=0, prefill_s_per_token=0.25)
    cfg = EngineConfig(max_num_seqs=2, kv_blocks=3, block_size=4, prefix_caching=False)
    ref = paged_reference(np.array([[9], [9]]), np.array([0, 0]), cost, cfg, record=True)
    batch = generate(np.array([[9], [9]]), np.array([0, 0]), cost, cfg)
    assert ref.preemptions.tolist() == [0, 1] == batch.preemptions.tolist()
    assert batch.t_finish.tolist() == ref.times["t_finish"].tolist()
    assert batch.t_finish[0] == 9.0
    assert ref.timeline["prefill_tokens"].sum() == 5  # the recomputed tokens of B
    assert batch.t_finish[1] == 9.0 + (1.0 + 0.25 * 5) + 3.0  # recompute makes token 6


def test_chunked_prefill_spreads_a_long_prompt():
    cost = LinearCost(a_s=1.0, b_s=0, c_s=0, prefill_s_per_token=0.0)
    cfg = EngineConfig(max_num_seqs=4, max_num_batched_tokens=8)
    batch = generate(np.array([[2]]), np.array([20]), cost, cfg)
    # 20 prompt tokens in chunks of 8, 8, 4: first token at the end of the 3rd iteration
    assert batch.t_first_token[0] == 3.0 and batch.t_finish[0] == 4.0


def test_prefix_caching_shares_prompt_blocks():
    cfg = EngineConfig(max_num_seqs=8, kv_blocks=10**6, block_size=16)
    ref = paged_reference(np.array([[1, 1, 1, 1]]), np.array([64]), ConstantCost(), cfg)
    # 4 shared prompt blocks + each sample's own block for its 65th token... 64 + 0
    assert ref.max_kv_blocks_used[0] == 4
    nocache = paged_reference(
        np.array([[1, 1, 1, 1]]),
        np.array([64]),
        ConstantCost(),
        EngineConfig(max_num_seqs=8, kv_blocks=10**6, prefix_caching=False),
    )
    assert nocache.max_kv_blocks_used[0] == 16


def test_request_too_long_for_the_cache_is_an_error():
    with pytest.raises(ValueError, match="KV blocks"):
        generate(np.array([[100]]), np.array([0]), ConstantCost(), EngineConfig(kv_blocks=2))
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        EngineConfig(max_num_seqs=8, max_num_batched_tokens=4)


def test_a_preemption_does_not_cut_the_next_segment_short():
    # The case above as an exclusive batch: boundary 1 admits A and B and runs to the
    # iteration where both need a 2nd block; boundary 2 preempts B, and A then runs
    # alone to its finish in one segment (no admission can happen before a finish:
    # free blocks only shrink); boundary 3 re-admits B, which runs to its finish.
    import simpy

    cost = LinearCost(a_s=1.0, b_s=0, c_s=0, prefill_s_per_token=0.25)
    cfg = EngineConfig(max_num_seqs=2, kv_blocks=3, block_size=4, prefix_caching=False)
    env = simpy.Environment()
    engine = Engine(env, cost, cfg)
    batch = engine.submit(np.arange(2), np.array([0, 0]), np.array([9, 9]), exclusive=True)
    env.run(until=batch.done)
    assert engine.workers[0].boundaries == 3
    assert batch.t_finish.tolist() == [9.0, 9.0 + (1.0 + 0.25 * 5) + 3.0]
