"""The block pool and prefix cache (vLLM v1's free queue): eviction order, partial hits,
a preempted sequence's own computed blocks, and the block count invariant."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.engine.core import EngineConfig, generate
from rolloutlab.sim.engine.prefix_cache import PrefixCache, admit, own_computed
from rolloutlab.sim.models.cost import LinearCost

from tests.reference.kv_loop import paged_reference


def queued(c: PrefixCache) -> int:
    return sum(ch[1] for ch in c.queue)


def test_freed_blocks_are_evicted_in_the_order_they_were_freed():
    c = PrefixCache(11)
    c.acquire("k", 3)  # a group's prompt: 3 blocks
    c.alloc(2)  # a sequence's own blocks
    c.give_back(2)  # it finishes: its own blocks can never be hit
    c.release("k", keep=True)  # group mates still queued: the prompt stays cached
    c.alloc(7)  # the 6 never-used blocks, then the finished sequence's first block
    assert c.hit("k") and c.hit_blocks("k") == 3
    c.alloc(2)  # the other own block, then the prompt's last block (freed last-first)
    assert not c.hit("k") and c.hit_blocks("k") == 2
    c.give_back(1)  # freed after the prompt: evicted after it
    assert c.acquire("k", 3) == 2  # hits the surviving 2, allocates the third
    assert c.used == 11 and queued(c) == 0 == c.free()


def test_a_preempted_sequences_own_blocks_survive_from_the_front():
    c = PrefixCache(8)
    c.alloc(8)
    c.give_back(4, ("own", 1), 3)  # 3 computed full blocks + a partial one
    c.give_back(2)  # another sequence finishes after it
    c.alloc(2)  # the partial block, then the last full block
    assert c.hit_blocks(("own", 1)) == 2
    assert c.take(("own", 1), 4) == 2 and c.used == 8 and c.free() == 0
    assert c.hit_blocks(("own", 1)) == -1


def test_admission_prefill_after_hits():
    B = 4
    c = PrefixCache(100)
    c.acquire("p", 2)  # prompt of 10 tokens: 2 full blocks shared
    c.give_back(0, ("own", 7), own_computed(10, 9, 0, 2, B))  # KV of 18 tokens: 2 own
    assert own_computed(10, 9, 0, 2, B) == 2
    # its prompt referenced, 2 own blocks cached: recompute 19 - 16 = 3 tokens
    assert admit(c, "p", ("own", 7), 10, 9, 2, 3, B) == (3, True)
    c2 = PrefixCache(100)  # nothing cached: the whole prompt and the generated tokens
    assert admit(c2, "q", ("own", 1), 10, 9, 2, 3, B) == (19, False)
    c2.give_back(3)
    c2.release("q", keep=True)
    # the prompt cached in full, no own entry: the model's convention, g tokens
    assert admit(c2, "q", ("own", 2), 10, 5, 2, 2, B) == (5, True)
    assert own_computed(10, 9, 5, 2, B) == 1  # still prefilling: 14 tokens computed


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 6)), max_size=40))
def test_queue_holds_every_free_block(ops):
    # Random allocations and frees: the queue always holds cap - used blocks and a
    # cached entry never holds more than it was given.
    cap = 30
    c = PrefixCache(cap)
    held: list[int] = []
    for kind, n in ops:
        if kind <= 1 and n <= c.free():
            c.alloc(n)
            held.append(n)
        elif kind == 2 and held:
            b = held.pop()
            c.give_back(b, ("own", len(ops) + len(held)), min(n, b))
        elif kind == 3 and held:
            c.give_back(held.pop())
        elif kind == 4 and n <= c.free():
            c.acquire(("p", n), n)
            c.release(("p", n), keep=True)
        assert queued(c) == cap - c.used
        assert all(0 <= ch[1] <= ch[2] for ch in c.cached.values())


def test_a_re_admitted_sequence_recomputes_only_what_was_evicted():
    # block 4 tokens, 3 blocks, no prompt. A (6 tokens) and B (9): with 5 tokens each
    # both need a 2nd block, B (latest admitted) is preempted; its KV then covers 4
    # tokens = 1 full block, which stays cached. A finishes; B is re-admitted, hits
    # that block and recomputes 1 token (5 without prefix caching).
    cost = LinearCost(a_s=1.0, b_s=0, c_s=0, prefill_s_per_token=0.25)
    L, P = np.array([[6], [9]]), np.array([0, 0])
    for caching, recomputed in ((True, 1), (False, 5)):
        cfg = EngineConfig(max_num_seqs=2, kv_blocks=3, block_size=4, prefix_caching=caching)
        ref = paged_reference(L, P, cost, cfg, record=True)
        batch = generate(L, P, cost, cfg)
        assert ref.preemptions.tolist() == [0, 1] == batch.preemptions.tolist()
        assert ref.timeline["prefill_tokens"].sum() == recomputed
        assert batch.t_finish.tolist() == ref.times["t_finish"].tolist()
        assert batch.t_finish.tolist() == [6.0, 6.0 + (1.0 + 0.25 * recomputed) + 3.0]


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 8),  # block size
    st.integers(0, 40),  # prompt tokens
    st.integers(1, 40),  # generated tokens at the preemption
    st.integers(1, 12),  # blocks other sequences free after the preemption
    st.integers(0, 12),  # blocks others then allocate (evicting from the head)
    st.booleans(),  # a group mate still references the prompt
)
def test_re_admission_after_a_preemption(B, P, g, spare, x, mate_running):
    # The cache is full of others' blocks; a producing sequence is preempted, others
    # free `spare` blocks and allocate `x`, it is re-admitted: it takes exactly the
    # blocks it needs, recomputes between 1 and P + g tokens, and hits only whole blocks.
    sh, own = P // B, -(-(P + g) // B) - P // B
    alloc = -(-(P + g - 1) // B) - sh  # blocks of its last iteration
    cap = sh + own + spare
    c = PrefixCache(cap)
    c.acquire("p", sh)
    if mate_running:
        c.acquire("p", sh)
    c.alloc(alloc)
    c.alloc(cap - c.used)  # others hold the rest
    n = own_computed(P, g, 0, sh, B)
    assert 0 <= n <= alloc and (sh + n) * B <= P + g - 1
    c.give_back(alloc, ("own", 0), n)
    c.release("p", keep=True)
    c.give_back(spare)  # others free blocks, after it
    c.alloc(min(x, spare - (own - alloc)))  # and allocate: its blocks are evicted first
    used = c.used
    rem, full = admit(c, "p", ("own", 0), P, g, sh, own, B)
    assert c.used == used + own + (0 if mate_running else sh) <= cap
    assert queued(c) == cap - c.used
    assert 0 <= rem <= P + g and (full or not mate_running)
    if full and rem < g:  # own blocks reused: whole blocks after the prompt's
        assert rem >= 1 and (P + g - rem) % B == 0 and P + g - rem > sh * B
    if not full:  # what survives of the prompt, whole blocks
        assert (P + g - rem) % B == 0 and (P + g - rem) // B < max(sh, 1)
