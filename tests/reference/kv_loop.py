"""Plain per-iteration loop of the paged engine (:class:`sim.engine.paged_worker.PagedWorker`), for tests,
calibration features and occupancy timelines.

Rules of one iteration of one worker (vLLM-v1-like; ``B`` = ``block_size``):

1. Running sequences, in admission order, get the KV blocks this iteration needs. A
   sequence with prompt ``P`` that has generated ``g`` tokens computes over ``P + g``
   tokens; it owns ``ceil((P + g) / B) - shared(P)`` blocks, ``shared(P) = P // B``
   full prompt blocks being shared by its group (prefix caching; 0 without). If free
   blocks run out, the latest-admitted running sequence is preempted (recompute): its
   blocks are freed, it goes to the front of the queue keeping ``g``; repeat. With
   prefix caching its computed full blocks stay cached until reused (vLLM v1).
2. Token budget ``max_num_batched_tokens``: one per decoding sequence, the rest goes to
   prefill chunks of sequences still prefilling (admission order). A prefilling
   sequence holds only the blocks of its chunks so far
   (:func:`sim.engine.prefix_cache.chunk_blocks`, vLLM's ``allocate_slots``); a chunk whose
   blocks are not free preempts from the tail, itself included.
3. Admission (only if nothing was preempted this iteration): while a slot
   (``max_num_seqs``), budget and blocks (own + shared if its prompt is not referenced)
   allow, the queue head is admitted; its prefill is ``P + g`` tokens less its prefix
   hits (:func:`sim.engine.prefix_cache.admit`: ``g`` when its prompt's blocks are cached,
   ``P + g - shared(P) B`` with ``recompute_partial_block``, fewer when a preempted
   sequence's own blocks survive, ``P + g - a B`` when only ``a`` prompt blocks do);
   a head whose prompt is still being prefilled by a group
   mate waits; without chunked prefill, so does a head whose prefill exceeds the budget
   left. A sequence produces a token in the iteration its prefill ends. Freed
   blocks join a free queue in the order they are freed and keep their content until
   an allocation reaches them; a freed partial block (no hash) goes to the head
   (:class:`sim.engine.prefix_cache.PrefixCache`, vLLM 0.32's block pool).
4. The iteration costs ``a + b n + c ctx + p * prefill`` (:mod:`sim.models.cost`), ``n`` the
   sequences producing a token, ``ctx`` the sum of their ``P + g``. A sequence finishing
   frees its blocks; a prompt's blocks are freed with its group's last sequence on the
   worker. An iteration with nothing running takes no time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from rolloutlab.sim.engine.config import EngineConfig
from rolloutlab.sim.engine.prefix_cache import (
    PrefixCache,
    admit,
    chunk_blocks,
    own_computed,
    partial_own,
    prefill_of,
)
from rolloutlab.sim.engine.schedule import assign_workers
from rolloutlab.sim.models.cost import LinearCost

TIMELINE_COLUMNS = (
    "worker",
    "t_start_s",
    "dt_s",
    "running",
    "context_tokens",
    "prefill_tokens",
    "kv_blocks_used",
    "waiting",
)


@dataclass
class PagedRun:
    """Result of :func:`paged_reference`."""

    times: dict[str, np.ndarray]
    """Flat ``(n,)`` arrays ``worker, t_first_token, t_finish`` (row-major (prompt, sample))."""
    features: np.ndarray
    """``(n_workers, 4)``: iterations, sum of running, sum of context, prefill tokens."""
    preemptions: np.ndarray
    """``(n,)`` times each request was preempted."""
    max_kv_blocks_used: np.ndarray
    """``(n_workers,)`` most KV blocks in use at any iteration."""
    timeline: dict[str, np.ndarray] = field(default_factory=dict)
    """Per iteration (``record=True``): :data:`TIMELINE_COLUMNS` arrays."""


def paged_reference(
    lengths: np.ndarray,
    prompt_tokens: np.ndarray,
    cost: LinearCost,
    config: EngineConfig,
    record: bool = False,
) -> PagedRun:
    """Run one synchronous phase (``(n_prompts, G)`` lengths, ``(n_prompts,)`` prompt
    tokens, all submitted at 0) iteration by iteration under the rules above.

    ``kv_blocks``/``max_num_batched_tokens`` of ``None`` mean unlimited, so this also
    runs non-paged configs. Raises ValueError if a request can never fit in the KV cache.
    """
    lengths = np.asarray(lengths)
    n_prompts, G = lengths.shape
    keys = np.repeat(np.arange(n_prompts), G)
    prompts = np.repeat(np.asarray(prompt_tokens, dtype=np.int64), G)
    assign, _ = assign_workers(keys, config)
    n = lengths.size
    out = PagedRun(
        times={
            "worker": assign,
            "t_first_token": np.full(n, np.nan),
            "t_finish": np.full(n, np.nan),
        },
        features=np.zeros((config.n_workers, 4)),
        preemptions=np.zeros(n, dtype=np.int64),
        max_kv_blocks_used=np.zeros(config.n_workers, dtype=np.int64),
    )
    rows: list[tuple] = []
    for w in range(config.n_workers):
        _run_worker(
            w,
            np.flatnonzero(assign == w).tolist(),
            keys.tolist(),
            prompts.tolist(),
            lengths.ravel().tolist(),
            cost,
            config,
            out,
            rows if record else None,
        )
    if record:
        cols: list = list(zip(*rows)) if rows else [[] for _ in TIMELINE_COLUMNS]
        out.timeline = {c: np.asarray(v) for c, v in zip(TIMELINE_COLUMNS, cols)}
    return out


def _run_worker(w, queue, keys, P, L, cost, cfg, out, rows):
    B, caching, part = cfg.block_size, cfg.prefix_caching, cfg.recompute_partial_block
    cap = cfg.kv_blocks if cfg.kv_blocks is not None else float("inf")
    tok_cap = cfg.max_num_batched_tokens if cfg.max_num_batched_tokens is not None else float("inf")
    shared = (lambda r: P[r] // B) if caching else (lambda r: 0)
    own = lambda r, g: -(-(P[r] + g) // B) - shared(r)
    for r in queue:
        if -(-(P[r] + L[r] - 1) // B) > cap:
            raise ValueError(
                f"request {r}: needs {-(-(P[r] + L[r] - 1) // B)} KV blocks, "
                f"worker capacity is {cap}"
            )
    left: dict[int, int] = {}
    for r in queue:
        left[keys[r]] = left.get(keys[r], 0) + 1
    g, alloc, rem, computing = {r: 0 for r in queue}, {r: 0 for r in queue}, {}, set()
    cache, pending, running, t = PrefixCache(cap), set(), [], 0.0
    coef = cost.coef()

    def preempt_tail():
        v = running.pop()
        if caching:  # its computed blocks stay cached (vLLM v1)
            n = own_computed(P[v], g[v], rem[v], shared(v), B)
            unhashed = partial_own(P[v], g[v], rem[v], shared(v), B)
            cache.give_back(alloc[v], ("own", v), n, unhashed)
            if v in computing:
                cache.release_computed(keys[v], (P[v] + g[v] - rem[v]) // B, shared(v))
            else:
                cache.release(keys[v], keep=True)
        else:
            cache.give_back(alloc[v])
        alloc[v], rem[v] = 0, 0
        if v in computing:
            computing.discard(v)
            pending.discard(keys[v])
        queue.insert(0, v)
        out.preemptions[v] += 1
        return v

    def chunk_fits(r, left):  # blocks of r's prefill once `left` tokens remain
        s, o = chunk_blocks(P[r], g[r], left, shared(r), B, r not in computing)
        held = cache.refs[keys[r]][1] if r in computing else s
        while s - held + o - alloc[r] > cache.free():
            if preempt_tail() == r:
                return False
        if s > held:
            cache.grow(keys[r], s - held)
        cache.alloc(o - alloc[r])
        alloc[r] = o
        return True

    while queue or running:
        preempted = False
        i = 0
        while i < len(running):  # 1. blocks for this iteration, preempting from the tail
            r = running[i]
            need = own(r, g[r]) - alloc[r] if rem[r] == 0 else 0
            if need <= cache.free():
                cache.alloc(need)
                alloc[r] += need
                i += 1
                continue
            preempt_tail()
            preempted = True
        producing = [r for r in running if rem[r] == 0]
        budget, prefill = tok_cap - len(producing), 0
        for r in list(running):  # 2. chunks of prefills in progress
            if rem[r] > 0 and budget > 0 and not preempted:
                ch = min(rem[r], budget)
                if not chunk_fits(r, rem[r] - ch):
                    preempted = True
                    continue
                rem[r] -= ch
                budget -= ch
                prefill += ch
                if rem[r] == 0:
                    producing.append(r)
                    if r in computing:
                        computing.discard(r)
                        pending.discard(keys[r])
        while not preempted and queue and len(running) < cfg.max_num_seqs and budget > 0:  # 3.
            r = queue[0]
            if caching and keys[r] in pending:
                break
            if own(r, g[r]) + (0 if keys[r] in cache.refs else shared(r)) > cache.free():
                break
            if caching:
                r0, hit = prefill_of(cache, keys[r], ("own", r), P[r], g[r], shared(r), B, part)
            else:
                r0, hit = P[r] + g[r], False
            if not cfg.chunked_prefill and max(r0, 1) > budget:
                break
            queue.pop(0)
            ch = min(r0, budget)
            s, alloc[r] = chunk_blocks(P[r], g[r], r0 - ch, shared(r), B, hit)
            if caching:
                admit(cache, keys[r], ("own", r), P[r], g[r], shared(r), alloc[r], B, part, s)
            else:
                cache.alloc(alloc[r])
            rem[r] = r0
            running.append(r)
            if rem[r] == 0:
                budget -= 1
                producing.append(r)
                continue
            rem[r] -= ch
            budget -= ch
            prefill += ch
            if rem[r] == 0:
                producing.append(r)
            elif caching and not hit:
                pending.add(keys[r])
                computing.add(r)
        if not running:
            if not preempted:
                raise RuntimeError(
                    f"worker {w}: request {queue[0]} cannot be admitted into an "
                    f"empty worker ({cache.free()} free KV blocks)"
                )
            continue
        ctx = sum(P[r] + g[r] for r in producing)
        f = np.array([1.0, len(producing), ctx, prefill])
        out.features[w] += f
        dt = float(f @ coef)
        assert cache.used + cache.cached_blocks <= cap, "KV use above capacity"
        out.max_kv_blocks_used[w] = max(out.max_kv_blocks_used[w], cache.used)
        if rows is not None:
            rows.append((w, t, dt, len(producing), ctx, prefill, cache.used, len(queue)))
        t += dt
        for r in producing:  # 4. one token each
            g[r] += 1
            if g[r] == 1 and np.isnan(out.times["t_first_token"][r]):
                out.times["t_first_token"][r] = t
            if g[r] == L[r]:
                out.times["t_finish"][r] = t
                running.remove(r)
                cache.give_back(alloc[r], unhashed=partial_own(P[r], g[r], 0, shared(r), B))
                alloc[r] = 0
                left[keys[r]] -= 1
                if caching:
                    cache.release(keys[r], keep=left[keys[r]] > 0)
