"""The paged engine's rules taken from vLLM 0.32's scheduler and block pool, by hand:
admission without chunked prefill, the partial prompt block a group mate recomputes,
chunk-by-chunk block allocation, and the reuse of hash-less blocks first."""

from __future__ import annotations

import numpy as np
from rolloutlab.sim.engine.core import EngineConfig, generate
from rolloutlab.sim.engine.prefix_cache import PrefixCache, chunk_blocks, partial_own
from rolloutlab.sim.models.cost import ConstantCost

from tests.reference.kv_loop import paged_reference

ITER = ConstantCost(1.0)  # (times are then iteration numbers)


def test_without_chunking_a_prefill_waits_for_a_budget_that_holds_it():
    # budget 7, three 6-token prompts, 3 tokens each. Chunked: r2 takes the 1 token left
    # at iteration 2 and finishes its prefill at 3. Unchunked: r2 waits until r0 has
    # finished (iteration 3) and one token per decoder leaves it 6 at iteration 4.
    lengths, prompts = np.array([[3], [3], [3]]), np.array([6, 6, 6])
    kw = dict(max_num_seqs=4, max_num_batched_tokens=7, prefix_caching=False)
    on = generate(lengths, prompts, ITER, EngineConfig(**kw))
    off = generate(lengths, prompts, ITER, EngineConfig(**kw, chunked_prefill=False))
    assert on.t_first_token.tolist() == [1.0, 2.0, 3.0]
    assert off.t_first_token.tolist() == [1.0, 2.0, 4.0]
    ref = paged_reference(lengths, prompts, ITER, EngineConfig(**kw, chunked_prefill=False))
    assert ref.times["t_first_token"].tolist() == off.t_first_token.tolist()


def test_a_group_mate_recomputes_its_prompts_partial_block_when_asked():
    # prompt of 10 tokens in blocks of 4: 2 shared full blocks and a partial one of 2
    cfg = dict(max_num_seqs=4, kv_blocks=100, block_size=4)
    lengths, prompts = np.array([[2, 2]]), np.array([10])
    free = paged_reference(lengths, prompts, ITER, EngineConfig(**cfg))
    vllm = paged_reference(
        lengths, prompts, ITER, EngineConfig(**cfg, recompute_partial_block=True)
    )
    assert free.features[0, 3] == 10 and vllm.features[0, 3] == 12


def test_a_chunked_prefill_holds_only_the_blocks_of_its_chunks():
    # 8 prompt tokens in chunks of 4 (blocks of 4): 1 block, then 2, then the 9th token's
    cfg = EngineConfig(max_num_seqs=4, kv_blocks=10, block_size=4, max_num_batched_tokens=4)
    ref = paged_reference(np.array([[2]]), np.array([8]), ITER, cfg, record=True)
    assert ref.timeline["kv_blocks_used"].tolist() == [1, 2, 3]
    assert chunk_blocks(8, 0, 4, 1, 4, hit=False) == (1, 0)
    # a hit prompt holds all its shared blocks at once: P=10, 8 tokens hit, 1 computed
    assert chunk_blocks(10, 0, 1, 2, 4, hit=True) == (2, 1)


def test_a_freed_partial_block_is_reused_before_cached_blocks():
    c = PrefixCache(4)
    c.alloc(4)
    c.give_back(1, "a", 1)  # a's one computed full block, hittable
    c.give_back(2, "b", 1, unhashed=1)  # b's full block, and its partial one (no hash)
    c.alloc(1)  # takes b's partial block from the head: a survives
    assert c.hit_blocks("a") == 1 and c.hit_blocks("b") == 1
    c.alloc(1)
    assert c.hit_blocks("a") == -1  # then the oldest cached block goes
    assert partial_own(8, 2, 0, 2, 4) == 1 and partial_own(8, 1, 0, 2, 4) == 0


def test_a_preempted_chunker_keeps_its_computed_prompt_blocks():
    c = PrefixCache(10)
    c.acquire("p", 2)  # two of the prompt's three shared blocks reached so far
    c.release_computed("p", 1, 3)  # one of them computed in full
    # an unfinished prompt entry is a partial hit: only its computed block is reused
    assert c.hit_blocks("p") == 1 and not c.hit("p") and c.used == 0
