"""The slot worker: one continuous-batching engine replica without KV pressure.

Life cycle of a request: submitted to a worker (dispatch policy) and queued FIFO;
admitted at an iteration boundary when a slot is free (``max_num_seqs``); the
admitting iteration prefills its prompt (prompt tokens already prefilled on that
worker — the other samples of its group — are free: prefix caching) and yields the
first token; each further iteration decodes one token; the request finishes at the
boundary after its last token (``response_tokens`` iterations in all).

Iteration ``j`` of a worker with ``n`` running sequences costs
``a + b n + c * context_j`` (+ prefill of the prompts admitted at ``j``), see
:mod:`sim.models.cost`. Between two batch changes (an admission or a completion) ``n`` is
fixed and the context grows by ``n`` per iteration, so ``m`` iterations take, in
closed form,
``m (a + b n + c (P - K0)) + c n (m k + m (m - 1) / 2)``
with ``P`` the running prompts' tokens, ``K0`` the sum of their admission iterations
and ``k`` the current iteration. A worker therefore yields one SimPy event per batch
change, never one per decode iteration (why: a step of 10^5 iterations costs ~10^2
events). :func:`tests.reference.engine_loop.reference_generate` is the plain per-iteration loop this must equal.
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np
import simpy
from rolloutlab.sim.engine.batch import Batch
from rolloutlab.sim.engine.config import EngineConfig
from rolloutlab.sim.engine.worker import EngineWorker, Segment
from rolloutlab.sim.models.cost import LinearCost

__all__ = ["Worker"]


class Worker(EngineWorker):
    """One continuous-batching engine replica without KV pressure (a SimPy process;
    interface: :class:`sim.engine.worker.EngineWorker`)."""

    def __init__(self, env: simpy.Environment, index: int, cost: LinearCost, config: EngineConfig):
        super().__init__(env, index, cost, config)
        self.waiting: deque[list] = deque()  # FIFO chunks [batch, idx array, idx list, pos]
        self.n_waiting = 0
        self.running: list[tuple[int, int, Batch, int]] = []  # heap (finish_k, seq, batch, i)
        self.k = 0  # iterations completed
        self.n = 0  # running sequences
        self.prompt_sum = 0  # P: prompt tokens of running sequences
        self.k0_sum = 0  # K0: sum of admission iterations of running sequences
        self._seq = 0
        self._cached: set = set()
        env.process(self.run())

    @property
    def outstanding(self) -> int:
        """Requests running or waiting on this worker."""
        return self.n + self.n_waiting

    def progress(self) -> list[tuple[Batch, int, int]]:
        """``(batch, i, tokens so far)`` of each running request (iterations since its
        admission, exact at a boundary)."""
        return [(b, i, self.k - (fk - b.resp_[i])) for fk, _, b, i in self.running]

    def _queue(self, batch: Batch, idx: np.ndarray) -> None:
        self.waiting.append([batch, idx, idx.tolist(), 0])
        self.n_waiting += len(idx)

    def _admit(self, t: float) -> float:
        """Admit waiting requests into free slots at boundary time ``t``; set their first
        token times; return this iteration's prefill time (s)."""
        if not self.n_waiting or self.n >= self.config.max_num_seqs:
            return 0.0
        admitted, prefill_tokens = [], 0
        while self.n < self.config.max_num_seqs and self.n_waiting:
            chunk = self.waiting[0]
            batch, i = chunk[0], chunk[2][chunk[3]]
            chunk[3] += 1
            if chunk[3] == len(chunk[2]):
                self.waiting.popleft()
            self.n_waiting -= 1
            key = (batch.serial, batch.keys_[i])
            if not self.config.prefix_caching or key not in self._cached:
                prefill_tokens += batch.prefill_[i]
                self._cached.add(key)
            heapq.heappush(self.running, (self.k + batch.resp_[i], self._seq, batch, i))
            self._seq += 1
            self.n += 1
            self.prompt_sum += batch.prompt_[i]
            self.k0_sum += self.k
            admitted.append((batch, i))
        prefill_s = self.cost.prefill_s(prefill_tokens)
        if admitted:
            t_first = t + (self.advance_s(1) + prefill_s)
            for batch, i in admitted:
                batch.first_[i] = t_first
        return prefill_s

    def advance_s(self, m: int) -> float:
        """Time (s) of the next ``m`` decode iterations with the batch as it is (closed form)."""
        return self.cost.segment_s(m, self.n, self.prompt_sum - self.k0_sum, self.k)

    def _complete(self, m: int) -> list[tuple[Batch, int]]:
        """Move the iteration counter ``m`` ahead and pop the sequences finishing there."""
        self.k += m
        done = []
        while self.running and self.running[0][0] == self.k:
            _, _, batch, i = heapq.heappop(self.running)
            self.n -= 1
            self.prompt_sum -= batch.prompt_[i]
            self.k0_sum -= self.k - batch.resp_[i]
            if not batch.coalesce:
                self._n_streaming -= 1
            done.append((batch, i))
        return done

    def _begin_segment(self) -> Segment:
        """Admit into free slots; the segment runs to the next completion (closed form)."""
        prefill_s = self._admit(self.env.now)
        m = self.running[0][0] - self.k
        return m, lambda j: self.advance_s(j) + prefill_s, lambda j, t0: self._complete(j)

    def apply_aborts(self, t: float) -> None:
        """Remove the requests marked by :meth:`abort` from the running heap and the FIFO
        queue at boundary time ``t`` and record them; running ones keep the tokens made so
        far (iterations since admission)."""
        marks = self._take_abort_marks()
        kept = []
        for finish_k, seq, batch, i in self.running:
            if (batch.serial, i) not in marks:
                kept.append((finish_k, seq, batch, i))
                continue
            k0 = finish_k - batch.resp_[i]  # admission iteration
            self.n -= 1
            self.prompt_sum -= batch.prompt_[i]
            self.k0_sum -= k0
            self._n_streaming -= 1
            batch.record_abort(i, t, self.k - k0)
        heapq.heapify(kept)
        self.running = kept
        chunks: deque[list] = deque()
        for batch, _idx, idx_list, pos in self.waiting:
            keep = []
            for i in idx_list[pos:]:
                if (batch.serial, i) in marks:
                    self.n_waiting -= 1
                    self._n_streaming -= 1
                    batch.record_abort(i, t, 0)
                else:
                    keep.append(i)
            if keep:
                chunks.append([batch, np.asarray(keep, dtype=np.int64), keep, 0])
        self.waiting = chunks

    def _one_wave_fits(self) -> bool:
        """All waiting requests, of one batch, can be admitted at once into an idle worker."""
        return (
            self.n == 0
            and len(self.waiting) == 1
            and self.waiting[0][3] == 0
            and self.n_waiting <= self.config.max_num_seqs
        )

    def _one_wave_times(self) -> tuple[Batch, np.ndarray, np.ndarray, float]:
        """Vectorised closed form for one wave admitted together at iteration ``k``.

        Returns ``(batch, idx, t_finish, t_first)``. The segment times use the very
        expression of :meth:`advance_s` and a sequential cumulative sum, so the times are
        bit-identical to the event-by-event path (why: tests compare them exactly).
        """
        batch, idx, _, _ = self.waiting.popleft()
        self.n_waiting = 0
        resp, prompt = batch.response_tokens[idx], batch.prompt_tokens[idx]
        if self.config.prefix_caching:
            _, first = np.unique(batch.prompt_keys[idx], return_index=True)  # one per prompt
            prefill_tokens, bid = 0, batch.serial
            for i in idx[np.sort(first)].tolist():
                key = (bid, batch.keys_[i])
                if key not in self._cached:
                    prefill_tokens += batch.prefill_[i]
                    self._cached.add(key)
        else:
            prefill_tokens = int(prompt.sum())
        c, k = self.cost, self.k
        order = np.argsort(resp, kind="stable")
        ends, first_pos = np.unique(resp[order], return_index=True)  # finish offsets
        n_left = len(idx) - first_pos  # (n_segments,) running during each segment
        p_done = np.concatenate(([0], np.cumsum(prompt[order])))[first_pos]
        P = float(prompt.sum()) - p_done
        K0 = n_left * float(k)
        start = np.concatenate(([0], ends[:-1]))
        m = (ends - start).astype(np.float64)
        kk = (k + start).astype(np.float64)
        seg = c.segment_s(m, n_left, P - K0, kk)
        prefill_s = c.prefill_s(prefill_tokens)
        seg[0] = seg[0] + prefill_s
        t_ends = np.add.accumulate(np.concatenate(([self.env.now], seg)))[1:]
        t_fin = np.empty(len(idx))
        t_fin[order] = np.repeat(t_ends, np.diff(np.append(first_pos, len(idx))))
        first_iter = c.segment_s(1, len(idx), float(prompt.sum()) - len(idx) * float(k), k)
        t_first = self.env.now + (first_iter + prefill_s)
        self.k = k + int(ends[-1])
        return batch, idx, t_fin, t_first

    def _run_one_wave(self):
        batch, idx, t_fin, t_first = self._one_wave_times()
        batch.first_[idx] = t_first
        batch.finish_[idx] = t_fin
        self._coalescing = True
        self.events += 1
        start = self.env.now
        end = float(t_fin.max())
        yield self.env.timeout(end - start)
        self._coalescing = False
        self.busy_s += end - start
        batch.remaining -= len(idx)
        if batch.remaining == 0:
            batch.done.succeed(batch)

    def _run_exclusive(self):
        """Run everything held to completion in closed form; yield once at the end."""
        if self._one_wave_fits():
            yield from self._run_one_wave()
            return
        t = self.env.now
        finished = []
        while self.n or self.n_waiting:
            prefill_s = self._admit(t) if self.n_waiting else 0.0
            m = self.running[0][0] - self.k
            t += self.advance_s(m) + prefill_s
            for batch, i in self._complete(m):
                batch.finish_[i] = t
                finished.append(batch)
        yield from self._hold_until(t, finished)
