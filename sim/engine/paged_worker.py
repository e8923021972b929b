"""Paged engine worker: KV cache in blocks, preemption by recompute, chunked prefill.

The scheduling rules are those of :mod:`tests.reference.kv_loop` (which runs them iteration by
iteration); :class:`PagedWorker` runs them in closed form between events. After the
scheduling of a boundary, if nothing was preempted and no prefill is in progress, the
batch stays fixed until the next finish or the next failed block allocation; both are
computed analytically: a sequence computing over ``x`` tokens at the first iteration
needs ``ceil((x + j) / B) - ceil(x / B)`` more blocks ``j`` iterations later, so the
failing iteration is the first ``j`` where the sum over the batch exceeds the free blocks.
``m`` iterations with ``n`` sequences over ``X`` context tokens at the first cost
``m (a + b n + c X) + c n m (m - 1) / 2`` (+ prefill;
:meth:`sim.models.cost.LinearCost.segment_from_s`).
The producing sequences are kept incrementally (:class:`sim.engine.kv_decode.DecodeSet`), so
a boundary costs O(sequences that change), not O(running sequences).
A worker without KV pressure and without a token budget is the faster
:class:`sim.engine.slot_worker.Worker` (same results, see tests).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import simpy
from rolloutlab.sim.engine.batch import Batch
from rolloutlab.sim.engine.config import EngineConfig
from rolloutlab.sim.engine.kv_decode import DecodeSet
from rolloutlab.sim.engine.prefix_cache import (
    PrefixCache,
    admit,
    chunk_blocks,
    own_computed,
    partial_own,
    prefill_of,
)
from rolloutlab.sim.engine.worker import EngineWorker, Segment
from rolloutlab.sim.models.cost import LinearCost


class _Req:
    """One request on a worker: prompt ``P``, target ``L``, generated ``g``, owned blocks
    ``alloc``, prefill tokens still to compute ``rem``; ``adm`` its admission number
    (order of the running list). While it produces tokens (``k >= 0``, start and phase
    in :class:`sim.engine.kv_decode.DecodeSet`) ``g`` and ``alloc`` are those at its start."""

    __slots__ = (
        *("batch", "i", "key", "P", "L", "sh", "g", "alloc", "rem", "computing"),
        *("adm", "k", "ph"),
    )

    def __init__(self, batch: Batch, i: int, block_size: int, caching: bool):
        self.batch, self.i = batch, i
        self.key = (batch.serial, batch.keys_[i])
        self.P, self.L = batch.prompt_[i], batch.resp_[i]
        self.sh = self.P // block_size if caching else 0
        self.g = self.alloc = self.rem = 0
        self.computing = False
        self.adm = self.k = self.ph = -1


class PagedWorker(EngineWorker):
    """A continuous-batching replica with a paged KV cache (a SimPy process; interface:
    :class:`sim.engine.worker.EngineWorker`, so it can be paused and aborted).

    Life cycle as :class:`sim.engine.slot_worker.Worker`; in addition requests can be preempted and
    re-queued at the front (``batch.preemptions`` counts it), and :attr:`preemptions`,
    :attr:`max_kv_blocks_used`, :attr:`boundaries` (iteration boundaries scheduled: the
    work a run costs) summarise the worker.
    """

    def __init__(self, env: simpy.Environment, index: int, cost: LinearCost, config: EngineConfig):
        super().__init__(env, index, cost, config)
        self.B = config.block_size
        self.cap = config.kv_blocks if config.kv_blocks is not None else math.inf
        self.tok_cap = (
            config.max_num_batched_tokens if config.max_num_batched_tokens is not None else math.inf
        )
        self.waiting: deque[_Req] = deque()
        self.running: list[_Req] = []  # admission order
        self.cache = PrefixCache(self.cap)
        self.left: dict = {}  # prompt key -> unfinished requests here
        self.pending: set = set()  # prompt keys being prefilled
        self.preemptions = 0
        self.max_kv_blocks_used = 0
        # (why: kept incrementally, a boundary costs O(sequences that change))
        self.producing = DecodeSet(self.B)  # running sequences producing tokens
        self.prefilling: list[_Req] = []  # running sequences still prefilling, admission order
        self._fresh: list[_Req] = []  # sequences that started producing at this boundary
        self._adm = 0  # admissions so far (admission order of the running list)
        self.boundaries = 0  # iteration boundaries scheduled (segments run in closed form)
        self._budget_stop = False  # this boundary's admissions stopped for the token budget
        env.process(self.run())

    @property
    def outstanding(self) -> int:
        """Requests running or waiting on this worker."""
        return len(self.running) + len(self.waiting)

    def progress(self) -> list[tuple[Batch, int, int]]:
        """``(batch, i, tokens so far)`` of each running request (a producing one has
        made ``K - k`` more since it was last counted: :mod:`sim.engine.kv_decode`)."""
        K = self.producing.K
        return [(r.batch, r.i, r.g + (K - r.k if r.k >= 0 else 0)) for r in self.running]

    def _queue(self, batch: Batch, idx: np.ndarray) -> None:
        """Queue requests ``idx`` of ``batch`` (FIFO). Raises ValueError if one can never
        fit in the KV cache."""
        for i in idx.tolist():
            r = _Req(batch, i, self.B, self.config.prefix_caching)
            if -(-(r.P + r.L - 1) // self.B) > self.cap:
                raise ValueError(
                    f"request {i}: prompt {r.P} + response {r.L} tokens need "
                    f"{-(-(r.P + r.L - 1) // self.B)} KV blocks, worker {self.index} "
                    f"has {self.cap}"
                )
            self.left[r.key] = self.left.get(r.key, 0) + 1
            self.waiting.append(r)

    def apply_aborts(self, t: float) -> None:
        """Remove the requests marked by :meth:`abort` at boundary time ``t`` and record
        them with the tokens generated so far. A running one frees its blocks and drops
        its prompt reference (the prompt's blocks stay cached while group mates remain on
        this worker, unless its prefill was unfinished); a queued one holds no blocks."""
        marks = self._take_abort_marks()
        running: list[_Req] = []
        waiting: deque[_Req] = deque()
        for r in self.running:
            if (r.batch.serial, r.i) not in marks:
                running.append(r)
                continue
            self._unrun(r)  # (r.g, r.alloc current)
            self.cache.give_back(r.alloc)
            r.alloc = 0
            self._leave(r)
            if self.config.prefix_caching:
                self.cache.release(r.key, keep=r.key in self.left and not r.computing)
            if r.computing:
                r.computing = False
                self.pending.discard(r.key)
            r.batch.record_abort(r.i, t, r.g)
        for r in self.waiting:
            if (r.batch.serial, r.i) not in marks:
                waiting.append(r)
                continue
            self._leave(r)
            r.batch.record_abort(r.i, t, r.g)
        self.running, self.waiting = running, waiting

    def _leave(self, r: _Req) -> None:
        """Count request ``r`` out of this worker (it was aborted)."""
        self.left[r.key] -= 1
        if self.left[r.key] == 0:
            del self.left[r.key]
        self._n_streaming -= 1

    def _produce(self, r: _Req) -> None:
        """Running ``r``, its prefill done, produces a token in every iteration from here."""
        self.producing.add(r)
        self._fresh.append(r)

    def _unrun(self, r: _Req) -> None:
        """Take running ``r`` out of the producing or prefilling sequences (it is
        preempted, finished or aborted, at a boundary before rule 1); ``r.g`` and
        ``r.alloc`` are then its current values."""
        if r.k >= 0:
            self.producing.remove(r)
        elif r.rem > 0:
            self.prefilling.remove(r)

    def _preempt_tail(self) -> _Req:
        v, cache = self.running.pop(), self.cache
        self._unrun(v)
        if self.config.prefix_caching:  # (its computed blocks stay cached, vLLM v1)
            n = own_computed(v.P, v.g, v.rem, v.sh, self.B)
            unhashed = partial_own(v.P, v.g, v.rem, v.sh, self.B)
            cache.give_back(v.alloc, v, n, unhashed)  # (the request keys its own blocks)
            if v.computing:  # (the prompt's computed full blocks stay cached)
                cache.release_computed(v.key, (v.P + v.g - v.rem) // self.B, v.sh)
            else:
                cache.release(v.key, keep=True)
        else:
            cache.give_back(v.alloc)
        v.alloc = v.rem = 0
        if v.computing:
            v.computing = False
            self.pending.discard(v.key)
        self.waiting.appendleft(v)
        v.batch.preemptions[v.i] += 1
        self.preemptions += 1
        return v

    def _schedule(self) -> tuple[int, bool]:
        """Rules 1-3 of :mod:`tests.reference.kv_loop` at a boundary: returns the next
        iteration's prefill tokens and whether a preemption happened. The sequences
        producing a token are :attr:`producing`; those that start now are ``_fresh``.

        Rule 1 looks only at the producing sequences whose phase is now (why: every
        other running sequence needs no block, and looking at all of them each boundary
        made a run cost O(boundaries x running)).
        """
        preempted, run, cache = False, self.running, self.cache
        self._fresh = []
        need = self.producing.needing()  # one block each (a live set: preempting shrinks it)
        # (why no per-sequence loop: served in admission order, the sequences run out of
        # blocks exactly when more need one than are free, and each preemption takes
        # the latest admitted, so preempting the tail while that holds, then giving every
        # remaining one its block, is the rule's outcome; the free queue is FIFO, so
        # allocating after the frees evicts the same blocks)
        while len(need) > cache.cap - cache.used:
            self._preempt_tail()
            preempted = True
        if need:
            cache.alloc(len(need))
        budget, prefill = self.tok_cap - self.producing.n, 0
        if self.prefilling:
            still = []
            for r in list(self.prefilling):
                if budget > 0 and not preempted:
                    ch = int(min(r.rem, budget))  # (an int: budget may be inf)
                    if not self._chunk_blocks(r, r.rem - ch):
                        preempted = True  # (r itself: it was the latest admitted)
                        continue
                    r.rem -= ch
                    budget -= ch
                    prefill += ch
                    if r.rem == 0:
                        self._produce(r)
                        if r.computing:
                            r.computing = False
                            self.pending.discard(r.key)
                        continue
                still.append(r)
            self.prefilling = still
        caching, B, waiting = self.config.prefix_caching, self.B, self.waiting
        slots, too_long = self.config.max_num_seqs, False
        chunked, part = self.config.chunked_prefill, self.config.recompute_partial_block
        while not preempted and waiting and len(run) < slots and budget > 0:
            r = waiting[0]
            if caching and r.key in self.pending:
                break
            own = -(-(r.P + r.g) // B) - r.sh
            if own + (0 if r.key in cache.refs else r.sh) > cache.cap - cache.used:
                break
            pre = prefill_of(cache, r.key, r, r.P, r.g, r.sh, B, part) if caching else None
            rem, hit = pre if pre is not None else (r.P + r.g, False)
            if not chunked and max(rem, 1) > budget:
                too_long = True  # (a budget stop too: the next iteration's is larger)
                break
            waiting.popleft()
            ch = int(min(rem, budget)) if rem else 0
            if ch == rem:  # (the whole prefill now: every block of the sequence)
                s, r.alloc = r.sh, own
            else:  # (the first chunk's blocks)
                s, r.alloc = chunk_blocks(r.P, r.g, rem - ch, r.sh, B, hit)
            if caching:
                admit(cache, r.key, r, r.P, r.g, r.sh, r.alloc, B, part, s, pre)
            else:
                cache.alloc(r.alloc)
            r.rem = rem - ch
            r.adm, self._adm = self._adm, self._adm + 1
            run.append(r)
            budget -= ch if ch else 1
            prefill += ch
            if r.rem == 0:
                self._produce(r)
            else:
                self.prefilling.append(r)
                if caching and not hit:
                    self.pending.add(r.key)
                    r.computing = True
        # (why: only a stop for the token budget can end differently at the next
        # boundary without a finish; blocks and slots only shrink until then)
        self._budget_stop = bool(self.waiting) and (budget <= 0 or too_long) and not preempted
        if not run and self.waiting and not preempted:
            raise RuntimeError(
                f"worker {self.index}: a request cannot be admitted into an empty "
                f"worker ({self.cache.free()} free KV blocks)"
            )
        self.max_kv_blocks_used = max(self.max_kv_blocks_used, self.cache.used)
        return prefill, preempted

    def _chunk_blocks(self, r: _Req, rem: int) -> bool:
        """Allocate the blocks prefilling ``r`` needs once ``rem`` tokens are left
        (:func:`sim.engine.prefix_cache.chunk_blocks`); if they are not free, preempt from the
        tail until they are or ``r`` itself was preempted (then False: vLLM's running
        loop, which reaches ``r``, the latest admitted, after every producing one)."""
        cache, computing = self.cache, r.computing
        s, own = chunk_blocks(r.P, r.g, rem, r.sh, self.B, not computing)
        held = cache.refs[r.key][1] if computing else s
        while s - held + own - r.alloc > cache.cap - cache.used:
            if self._preempt_tail() is r:
                return False
        if s > held:
            cache.grow(r.key, s - held)
        cache.alloc(own - r.alloc)
        r.alloc = own
        return True

    def _segment(self):
        """Schedule a boundary and size the segment that follows. Returns ``None`` (nothing
        runnable) or ``(n, m, per_iter_s, prefill_s)``, ``n`` the producing sequences."""
        prefill, preempted = self._schedule()
        self.boundaries += 1
        if not self.running:
            return None
        c, dec = self.cost, self.producing
        n, X = dec.n, dec.context()  # (X: their P + g, an exact int)
        if n < len(self.running) or (prefill and self._budget_stop):
            m = 1  # (why: a prefill is still chunking, or the next boundary may admit)
        else:
            m = dec.next_finish() - dec.K
            if self.cap != math.inf:
                m = dec.first_failure(self.cache.free(), m)
        return n, m, c.decode_iter_s(n, X), c.prefill_s(prefill)

    def _dt(self, n: int, m: int, per_iter: float, prefill_s: float) -> float:
        return self.cost.segment_from_s(m, n, per_iter) + prefill_s

    def _apply(self, m: int, t_first: float, t_end: float, record) -> None:
        """Move the producing sequences ``m`` tokens ahead; finishes go to ``record``, in
        the order the rules list producing sequences (those producing before this
        boundary, then those starting now, each in admission order)."""
        for r in self._fresh:
            if r.g == 0 and math.isnan(r.batch.first_[r.i]):
                r.batch.first_[r.i] = t_first
        extra = self.producing.extra(m - 1)  # blocks of the segment's iterations 2..m
        if extra:
            self.cache.alloc(extra)  # (same evictions as one sequence at a time)
        finishing = self.producing.advance(m)
        self.max_kv_blocks_used = max(self.max_kv_blocks_used, self.cache.used)
        for r in finishing:
            self._unrun(r)
            self.running.remove(r)
            self.cache.give_back(r.alloc, unhashed=partial_own(r.P, r.g, 0, r.sh, self.B))
            r.alloc = 0
            self.left[r.key] -= 1
            if self.left[r.key] == 0:
                del self.left[r.key]
            if self.config.prefix_caching:
                self.cache.release(r.key, keep=r.key in self.left)
            if not r.batch.coalesce:
                self._n_streaming -= 1
            record(r.batch, r.i, t_end)

    def _begin_segment(self) -> Segment | None:
        """Schedule a boundary (rules 1-3); the segment runs to the next change."""
        seg = self._segment()
        if seg is None:
            return None
        n, m, per_iter, prefill_s = seg

        def end(j: int, t0: float) -> list[tuple[Batch, int]]:
            done: list[tuple[Batch, int]] = []
            self._apply(
                j, t0 + per_iter + prefill_s, self.env.now, lambda b, i, t: done.append((b, i))
            )
            return done

        return m, lambda j: self._dt(n, j, per_iter, prefill_s), end

    def _run_exclusive(self):
        """Run everything held to completion in closed form; yield once at the end."""
        t, finished = self.env.now, []

        def record(batch, i, t_end):
            batch.finish_[i] = t_end
            finished.append(batch)

        while self.running or self.waiting:
            seg = self._segment()
            if seg is None:
                continue
            n, m, per_iter, prefill_s = seg
            t_end = t + self._dt(n, m, per_iter, prefill_s)
            self._apply(m, t + per_iter + prefill_s, t_end, record)
            t = t_end
        yield from self._hold_until(t, finished)
