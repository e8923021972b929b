"""SimPy model of rollout generation: W workers, each a continuous-batching engine.

Life cycle of a request: submitted to a worker (dispatch policy) and queued FIFO;
admitted at an iteration boundary when a slot is free (``max_num_seqs``); the
admitting iteration prefills its prompt (prompt tokens already prefilled on that
worker — the other samples of its group — are free: prefix caching) and yields the
first token; each further iteration decodes one token; the request finishes at the
boundary after its last token (``response_tokens`` iterations in all).

Iteration ``j`` of a worker with ``n`` running sequences costs
``a + b n + c * context_j`` (+ prefill of the prompts admitted at ``j``), see
:mod:`sim.cost`. Between two batch changes (an admission or a completion) ``n`` is
fixed and the context grows by ``n`` per iteration, so ``m`` iterations take, in
closed form,
``m (a + b n + c (P - K0)) + c n (m k + m (m - 1) / 2)``
with ``P`` the running prompts' tokens, ``K0`` the sum of their admission iterations
and ``k`` the current iteration. A worker therefore yields one SimPy event per batch
change, never one per decode iteration (why: a step of 10^5 iterations costs ~10^2
events). :func:`reference_generate` is the plain per-iteration loop this must equal.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import simpy
from rolloutlab.sim import engine_control
from rolloutlab.sim.batch import Batch
from rolloutlab.sim.cost import LinearCost

DISPATCH = ("round_robin", "least_loaded", "group")


@dataclass(frozen=True)
class EngineConfig:
    """Generation side of the simulated cluster."""

    n_workers: int = 1
    """Engine replicas (a tensor-parallel group counts as one worker)."""
    max_num_seqs: int = 256
    """vLLM ``max_num_seqs``: most sequences running at once on one worker."""
    dispatch: str = "group"
    """``round_robin`` (rollout i -> worker i mod W), ``least_loaded`` (fewest outstanding
    requests at submit) or ``group`` (a prompt's whole group on one worker, as vLLM does
    with ``n=G``; groups round-robin)."""
    prefix_caching: bool = True
    """Samples of one prompt on one worker share its prefill (and, with ``kv_blocks``,
    the prompt's full KV blocks)."""
    kv_blocks: int | None = None
    """KV-cache capacity per worker in blocks of ``block_size`` tokens (e.g.
    :meth:`sim.roofline.RooflineConfig.kv_blocks`); ``None`` = unlimited (no KV
    pressure). When set, workers are :class:`sim.kv.PagedWorker` (preemption by
    recompute)."""
    block_size: int = 16
    """KV block size in tokens (vLLM default 16)."""
    max_num_batched_tokens: int | None = None
    """vLLM ``max_num_batched_tokens``: tokens per iteration (one per decoding sequence +
    prefill chunk tokens); longer prefills are chunked. ``None`` = unlimited. Must be
    >= ``max_num_seqs`` (as vLLM requires)."""

    def __post_init__(self) -> None:
        if self.n_workers < 1 or self.max_num_seqs < 1:
            raise ValueError(f"EngineConfig: need n_workers >= 1 and max_num_seqs >= 1: {self}")
        if self.dispatch not in DISPATCH:
            raise ValueError(
                f"EngineConfig: dispatch must be one of {DISPATCH}, got {self.dispatch!r}"
            )
        if self.block_size < 1 or (self.kv_blocks is not None and self.kv_blocks < 1):
            raise ValueError(
                f"EngineConfig: need block_size >= 1 and kv_blocks >= 1 or None, "
                f"got {self.block_size}, {self.kv_blocks}"
            )
        if (
            self.max_num_batched_tokens is not None
            and self.max_num_batched_tokens < self.max_num_seqs
        ):
            raise ValueError(
                f"EngineConfig: max_num_batched_tokens ({self.max_num_batched_tokens}) "
                f"must be >= max_num_seqs ({self.max_num_seqs})"
            )

    @property
    def paged(self) -> bool:
        """KV blocks or a token budget are modelled (:class:`sim.kv.PagedWorker`)."""
        return self.kv_blocks is not None or self.max_num_batched_tokens is not None


class Worker:
    """One continuous-batching engine replica (a SimPy process)."""

    def __init__(self, env: simpy.Environment, index: int, cost: LinearCost, config: EngineConfig):
        self.env, self.index, self.cost, self.config = env, index, cost, config
        self.waiting: deque[list] = deque()  # FIFO chunks [batch, idx array, idx list, pos]
        self.n_waiting = 0
        self._n_streaming = 0  # held requests of batches that cannot run in closed form
        self.running: list[tuple[int, int, Batch, int]] = []  # heap (finish_k, seq, batch, i)
        self.k = 0  # iterations completed
        self.n = 0  # running sequences
        self.prompt_sum = 0  # P: prompt tokens of running sequences
        self.k0_sum = 0  # K0: sum of admission iterations of running sequences
        self._seq = 0
        self._cached: set = set()
        self._wakeup = env.event()
        self._coalescing = False
        self.busy_s = 0.0
        self.events = 0
        self.hold: simpy.Event | None = None  # set by Engine.pause: wait on it at the next boundary
        self.stopped: simpy.Event | None = None  # fires when this worker has stopped for `hold`
        self._abort: set[tuple[int, int]] = set()  # (id(batch), i) to remove at the next boundary
        self._at_boundary = False  # True only while idle or held: aborts then apply at once
        env.process(self.run())

    @property
    def outstanding(self) -> int:
        """Requests running or waiting on this worker."""
        return self.n + self.n_waiting

    def enqueue(self, batch: Batch, idx: np.ndarray) -> None:
        """Queue requests ``idx`` (int array) of ``batch`` in that order (FIFO); wakes the worker."""
        if self._coalescing:
            raise RuntimeError(
                f"worker {self.index}: a request was submitted while an "
                "exclusive batch was running (see Batch(exclusive=...))"
            )
        batch.worker[idx] = self.index
        self.waiting.append([batch, idx, idx.tolist(), 0])
        self.n_waiting += len(idx)
        if not batch.coalesce:
            self._n_streaming += len(idx)
        if not self._wakeup.triggered:
            self._wakeup.succeed()

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
            key = (id(batch), batch.keys_[i])
            if not self.config.prefix_caching or key not in self._cached:
                prefill_tokens += batch.prompt_[i]
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
        c = self.cost
        per_iter = c.a_s + c.b_s * self.n + c.c_s * (self.prompt_sum - self.k0_sum)
        return m * per_iter + c.c_s * self.n * (m * self.k + m * (m - 1) / 2.0)

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

    def run(self):
        """Process: admit, advance to the next completion in closed form, repeat."""
        env = self.env
        while True:
            if self._abort:
                self.apply_aborts(env.now)
            if self.hold is not None and not self.hold.triggered:
                yield from self._held()
                continue
            if self.n == 0 and not self.n_waiting:
                self._wakeup = env.event()
                self._at_boundary = True
                yield self._wakeup
                self._at_boundary = False
                continue
            if self._n_streaming == 0:
                yield from self._run_exclusive()
                continue
            prefill_s = self._admit(env.now)
            m = self.running[0][0] - self.k
            dt = self.advance_s(m) + prefill_s
            self._wakeup = env.event()
            t0 = env.now
            self.events += 1
            yield env.any_of([env.timeout(dt), self._wakeup])
            if env.now < t0 + dt:  # an arrival: stop at the boundary after now, admit it
                m = self._iterations_to_boundary(env.now - t0, m, prefill_s)
                rest = self.advance_s(m) + prefill_s - (env.now - t0)
                yield env.timeout(max(rest, 0.0))
            self.busy_s += env.now - t0
            for batch, i in self._complete(m):
                batch.finished(i, env.now)

    def _held(self):
        """Stop at this iteration boundary until :meth:`Engine.resume` (pause hook)."""
        self._at_boundary = True
        if not self.stopped.triggered:
            self.stopped.succeed()
        yield self.hold
        self._at_boundary = False

    def wake(self) -> None:
        """Make the worker reach its next iteration boundary and look at pause/abort requests."""
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    def apply_aborts(self, t: float) -> None:
        """Remove requests marked by :meth:`Engine.abort` (at a boundary, time ``t``)."""
        engine_control.apply_aborts(self, t)

    def _iterations_to_boundary(self, elapsed_s: float, m: int, prefill_s: float) -> int:
        """Smallest ``j`` in ``[1, m]`` whose boundary is at or after ``elapsed_s``."""
        lo, hi = 1, m
        while lo < hi:
            mid = (lo + hi) // 2
            if self.advance_s(mid) + prefill_s >= elapsed_s:
                hi = mid
            else:
                lo = mid + 1
        return lo

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
            prefill_tokens, bid = 0, id(batch)
            for i in idx[np.sort(first)].tolist():
                key = (bid, batch.keys_[i])
                if key not in self._cached:
                    prefill_tokens += batch.prompt_[i]
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
        per_iter = c.a_s + c.b_s * n_left + c.c_s * (P - K0)
        seg = m * per_iter + c.c_s * n_left * (m * kk + m * (m - 1) / 2.0)
        prefill_s = c.prefill_s(prefill_tokens)
        seg[0] = seg[0] + prefill_s
        t_ends = np.add.accumulate(np.concatenate(([self.env.now], seg)))[1:]
        t_fin = np.empty(len(idx))
        t_fin[order] = np.repeat(t_ends, np.diff(np.append(first_pos, len(idx))))
        first_iter = c.a_s + c.b_s * len(idx) + c.c_s * (float(prompt.sum()) - len(idx) * float(k))
        t_first = self.env.now + (1 * first_iter + c.c_s * len(idx) * (1 * k + 0.0) + prefill_s)
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
        yield from hold_until(self, t, finished)


def hold_until(worker, t_end: float, finished: list) -> object:
    """Process step of an exclusive closed-form run: hold ``worker`` (refusing new
    requests) until ``t_end``, then count each finished request (one ``Batch`` entry per
    request in ``finished``) and fire the batches that are done."""
    worker._coalescing = True
    worker.events += 1
    start = worker.env.now
    yield worker.env.timeout(t_end - start)
    worker._coalescing = False
    worker.busy_s += t_end - start
    for batch in finished:
        batch.remaining -= 1
        if batch.remaining == 0:
            batch.done.succeed(batch)


class Engine:
    """W :class:`Worker` replicas and a dispatcher, inside one SimPy environment."""

    def __init__(self, env: simpy.Environment, cost: LinearCost, config: EngineConfig):
        self.env, self.cost, self.config = env, cost, config
        if config.paged:
            from rolloutlab.sim.kv import PagedWorker  # (why: sim.kv imports Batch from here)

            worker_cls = PagedWorker
        else:
            worker_cls = Worker
        self.workers = [worker_cls(env, w, cost, config) for w in range(config.n_workers)]
        self._rr = 0

    def submit(
        self,
        prompt_keys,
        prompt_tokens,
        response_tokens,
        on_finish: Callable | None = None,
        exclusive: bool = False,
    ) -> Batch:
        """Submit requests now; returns their :class:`Batch` (wait on ``batch.done``).

        ``exclusive``: see :class:`Batch`. Raises RuntimeError if an exclusive batch
        is still running on a worker that receives a request.
        """
        batch = Batch(self.env, prompt_keys, prompt_tokens, response_tokens, on_finish, exclusive)
        batch.t_submit[:] = self.env.now
        assign = self._assign(batch)
        for w, worker in enumerate(self.workers):
            idx = np.flatnonzero(assign == w)
            if idx.size:
                worker.enqueue(batch, idx)
        return batch

    def pause(self) -> simpy.Event:
        """Stop every worker at its next iteration boundary; see :func:`sim.engine_control.pause`."""
        return engine_control.pause(self)

    def resume(self) -> None:
        """Let the workers stopped by :meth:`pause` continue now."""
        engine_control.resume(self)

    def abort(self, batch: Batch, idx) -> None:
        """Abort requests ``idx`` of ``batch``; see :func:`sim.engine_control.abort`."""
        engine_control.abort(self, batch, idx)

    def _assign(self, batch: Batch) -> np.ndarray:
        W, n = self.config.n_workers, len(batch.response_tokens)
        if self.config.dispatch == "round_robin":
            out = (self._rr + np.arange(n)) % W
            self._rr = int((self._rr + n) % W)
            return out
        if self.config.dispatch == "group":
            _, group = np.unique(batch.prompt_keys, return_inverse=True)
            first = np.unique(group, return_index=True)[1]
            order = np.argsort(np.argsort(first))  # groups numbered by first appearance
            out = (self._rr + order[group]) % W
            self._rr = int((self._rr + len(first)) % W)
            return out
        load = np.array([wk.outstanding for wk in self.workers], dtype=np.int64)
        out = np.empty(n, dtype=np.int64)
        for i in range(n):
            w = int(np.argmin(load))
            out[i] = w
            load[w] += 1
        return out


# (why at the bottom: sim.engine_reference uses Engine and Batch defined above)
from rolloutlab.sim.engine_reference import generate, reference_generate  # noqa: E402,F401
