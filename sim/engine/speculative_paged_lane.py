"""One paged worker's synchronous share with speculative decoding, iteration by iteration:
KV blocks for the tokens a verify step writes, preemption by recompute.

The rules are those of :class:`sim.engine.paged_worker.PagedWorker` without a token budget
(:mod:`tests.reference.kv_loop`), run one iteration at a time because a verify step's
tokens are drawn (:func:`sim.engine.speculative.step_tokens`), so no closed form between
events. At each boundary:

1. every producing sequence, in admission order, gets the blocks it needs for this
   iteration; when they are not free the latest admitted is preempted (its blocks freed,
   re-queued at the front with its tokens kept, recomputed on re-admission) until they
   are, or until it was itself preempted;
2. if nothing was preempted, queued requests are admitted first in, first out while a
   slot and their blocks are free; the admitting iteration prefills and emits one token.

Blocks of a sequence whose prompt and generated tokens span ``x = P + g`` tokens:
``ceil(x / B)`` when it decodes plainly (the iteration writes the KV of its newest token),
``ceil((x + k + lookahead) / B)`` when it verifies: the ``k`` draft tokens are written
with it, and a drafter with a KV cache of its own reserves ``k`` lookahead slots more
(vLLM v1: ``Scheduler.schedule`` calls ``KVCacheManager.allocate_slots`` with
``num_new_tokens = 1 + k`` and ``num_lookahead_tokens = k`` for EAGLE and draft models,
0 for n-gram; here a drafter with ``draft_cost > 0`` is a draft model). Rejected drafts'
slots are not returned (vLLM rolls back ``num_computed_tokens``, not blocks), so a
sequence holds the most it ever needed. A newly admitted sequence reserves no lookahead
(vLLM: none while ``num_computed_tokens == 0``).

Prefix caching: a prompt's ``P // B`` full blocks are shared by the sequences of the same
prompt running on the worker and freed with the last of them; a sequence admitted while
its prompt is held prefills only its own generated tokens (none for a fresh one), else
``P + g``. Not followed from :class:`~sim.engine.paged_worker.PagedWorker`: blocks kept in
the cache after their last user (an LRU free queue) and a preempted sequence's surviving
own blocks; with prefix caching and preemption this lane is the more pessimistic.

Tail-only switch, draws and cost as :mod:`sim.engine.speculative_lane`: one generator per
(seed, step, worker), a verify iteration priced by
:meth:`~sim.engine.speculative.SpeculativeDecoding.verify_cost`, speculation on from the first
boundary with nothing queued and fewer than ``tail_below`` sequences running.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
from rolloutlab.sim.engine.speculative import SpeculativeDecoding, step_tokens
from rolloutlab.sim.models.cost import LinearCost


@dataclass
class PagedLaneTimes:
    """What :func:`speculative_paged_lane` returns; arrays are (n,) in the share's FIFO order."""

    t_first: np.ndarray
    """Seconds from the lane's start to each request's first token."""
    t_finish: np.ndarray
    """Seconds from the lane's start to each request's end."""
    spec_steps: np.ndarray
    """Verify steps each request took (0 if it never speculated)."""
    drawn: np.ndarray
    """Tokens those verify steps drew, before the cut at the request's end."""
    preemptions: np.ndarray
    """Times each request was preempted."""
    max_blocks: int
    """Most KV blocks in use at once."""


def lookahead(speculative: SpeculativeDecoding) -> int:
    """Slots a verifying sequence reserves beyond its ``k`` drafts: ``k`` for a draft model
    (``draft_cost > 0``, vLLM's ``num_lookahead_tokens``), 0 for n-gram drafting."""
    return speculative.k if speculative.draft_cost > 0 else 0


def speculative_paged_lane(
    L: np.ndarray,
    P: np.ndarray,
    keys: np.ndarray,
    cost: LinearCost,
    max_num_seqs: int,
    kv_blocks: int,
    block_size: int,
    prefix_caching: bool,
    speculative: SpeculativeDecoding,
    step: int = 0,
    worker: int = 0,
) -> PagedLaneTimes:
    """Times of one worker's FIFO share ``L`` (response tokens, >= 1), ``P`` (prompt
    tokens), ``keys`` (prompt keys), all (n,), from an idle start at learner step ``step``
    with ``kv_blocks`` blocks of ``block_size`` tokens (module doc).

    Raises ValueError for an empty share, a length < 1, or a request that cannot fit in
    the cache even alone while verifying; RuntimeError if nothing can be admitted into an
    empty worker (cannot happen after that check).
    """
    L = np.asarray(L, dtype=np.int64)
    if L.size == 0 or (L < 1).any():
        raise ValueError("speculative_paged_lane: need at least one request, each of >= 1 tokens")
    Pl = np.asarray(P, dtype=np.int64).tolist()
    Ll, keyl, Bk = L.tolist(), np.asarray(keys).tolist(), block_size
    reserve = speculative.k + lookahead(speculative)
    for i, (p, n_tok) in enumerate(zip(Pl, Ll, strict=True)):
        if -(-(p + n_tok - 1 + reserve) // Bk) > kv_blocks:
            raise ValueError(
                f"request {i}: prompt {p} + response {n_tok} tokens + {reserve} speculative "
                f"slots need {-(-(p + n_tok - 1 + reserve) // Bk)} KV blocks, the worker "
                f"has {kv_blocks}"
            )
    n_req = len(Ll)
    rng = np.random.default_rng([speculative.seed, step, worker])
    k, alpha = speculative.k, speculative.alpha_at(step)
    vcost = speculative.verify_cost(cost)
    out = PagedLaneTimes(
        np.full(n_req, np.nan), np.full(n_req, np.nan), np.zeros(n_req, dtype=np.int64),
        np.zeros(n_req, dtype=np.int64), np.zeros(n_req, dtype=np.int64), 0,
    )  # fmt: skip
    g = [0] * n_req  # tokens emitted
    alloc = [0] * n_req  # own blocks held
    sh = [p // Bk if prefix_caching else 0 for p in Pl]  # shared prompt blocks
    refs: dict = {}  # prompt key -> running sequences holding its shared blocks
    waiting: deque[int] = deque(range(n_req))
    running: list[int] = []  # admission order
    used, t = 0, 0.0
    speculating = speculative.tail_below is None

    def release(i: int) -> None:
        nonlocal used
        used -= alloc[i]
        alloc[i] = 0
        if prefix_caching:
            refs[keyl[i]] -= 1
            if refs[keyl[i]] == 0:
                del refs[keyl[i]]
                used -= sh[i]

    while waiting or running:
        if not speculating and not waiting and len(running) < speculative.tail_below:  # type: ignore[operator]
            speculating = True
        extra = reserve if speculating else 0
        preempted, fresh = False, []
        j = 0
        while j < len(running):  # rule 1, admission order
            i = running[j]
            need = -(-(Pl[i] + g[i] + extra) // Bk) - sh[i] - alloc[i]
            while need > kv_blocks - used and running[-1] != i:
                v = running.pop()
                release(v)
                waiting.appendleft(v)
                out.preemptions[v] += 1
                preempted = True
            if need > kv_blocks - used:  # i itself is the latest admitted
                running.pop()
                release(i)
                waiting.appendleft(i)
                out.preemptions[i] += 1
                preempted = True
                break
            if need > 0:
                alloc[i] += need
                used += need
            j += 1
        prefill = 0
        while not preempted and waiting and len(running) < max_num_seqs:  # rule 2
            i = waiting[0]
            held = prefix_caching and keyl[i] in refs
            own = -(-(Pl[i] + g[i]) // Bk) - sh[i]
            if own + (0 if held else sh[i]) > kv_blocks - used:
                break
            waiting.popleft()
            alloc[i] = own
            used += own + (0 if held else sh[i])
            if prefix_caching:
                refs[keyl[i]] = refs.get(keyl[i], 0) + 1
            prefill += g[i] if held else Pl[i] + g[i]
            running.append(i)
            fresh.append(i)
        if not running:
            raise RuntimeError(
                f"worker {worker}: a request cannot be admitted into an empty worker "
                f"({kv_blocks - used} free KV blocks)"
            )
        out.max_blocks = max(out.max_blocks, used)
        ctx = sum(Pl[i] + g[i] for i in running)
        c = vcost if speculating else cost
        t += c.decode_iter_s(len(running), float(ctx)) + cost.prefill_s(float(prefill))
        new = set(fresh)
        verifying = [i for i in running if speculating and i not in new]
        if verifying:
            drew = step_tokens(rng, len(verifying), k, alpha).tolist()
            for i, d in zip(verifying, drew, strict=True):
                out.spec_steps[i] += 1
                out.drawn[i] += d
                g[i] = min(g[i] + d, Ll[i])
        for i in running:
            if i in new or not speculating:
                g[i] += 1
            if g[i] == 1 and np.isnan(out.t_first[i]):
                out.t_first[i] = t
        done = [i for i in running if g[i] >= Ll[i]]
        for i in done:
            out.t_finish[i] = t
            release(i)
        if done:
            running = [i for i in running if g[i] < Ll[i]]
    return out
