"""The interface of an engine worker, and the pause/abort state every worker shares.

A worker is one continuous-batching engine replica, run as a SimPy process. Two kinds
implement :class:`EngineWorker`: :class:`sim.engine.slot_worker.Worker` (slots only, closed form)
and :class:`sim.engine.paged_worker.PagedWorker` (paged KV cache, preemption, chunked prefill). The
engine (:class:`sim.engine.core.Engine`) and its pause/abort hooks (:mod:`sim.engine.interrupts`)
use only this interface, so both kinds can be paused and aborted (the asynchronous
pipelines run on either).

What a worker offers:

- :meth:`~EngineWorker.enqueue` requests of a :class:`~sim.engine.batch.Batch`;
  :meth:`~EngineWorker.progress` of running ones; :attr:`~EngineWorker.outstanding`, :attr:`~EngineWorker.busy_s`,
  :attr:`~EngineWorker.events`;
- :meth:`~EngineWorker.hold_at_boundary` (stop at the next iteration boundary until the
  ``hold`` event fires; returns the ``stopped`` event) and :attr:`~EngineWorker.held`;
- :meth:`~EngineWorker.wake` (reach the next boundary now, e.g. to see a hold);
- :meth:`~EngineWorker.abort` (remove requests at the next boundary, at once when idle
  or held), which calls the worker's own :meth:`~EngineWorker.apply_aborts`.

The run loop is written once, here (:meth:`EngineWorker.run`, a template as SimPy's
``BaseResource`` writes its put/get loop once): at each iteration boundary apply aborts and
wait while held or idle; run an exclusive batch to its end in closed form
(:meth:`_run_exclusive`, one event); else ask the subclass for the next *segment* (the
iterations until the batch changes next, and their time as a function of the count),
wait for it as one SimPy event, stop early at the boundary after an arrival (bisection on
the segment's time), and let the subclass complete the iterations run.

A subclass implements :meth:`_queue`, :attr:`outstanding`, :meth:`progress`,
:meth:`apply_aborts`, :meth:`_run_exclusive` (calling :meth:`_hold_until`) and the two
hooks :meth:`_begin_segment` and (returned by it) the segment's ``end``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy
from rolloutlab.sim.engine.batch import Batch
from rolloutlab.sim.engine.config import EngineConfig
from rolloutlab.sim.models.cost import LinearCost

Segment = tuple[int, Callable[[int], float], Callable[[int, float], list[tuple[Batch, int]]]]
"""``(m, dt_s, end)`` of a worker's next segment: ``m`` iterations until the running batch
changes next; ``dt_s(j)`` the seconds of its first ``j`` iterations (admission prefill
included; increasing in ``j``); ``end(j, t0)`` completes ``j`` iterations of a segment begun
at ``t0`` and returns the ``(batch, i)`` requests finishing there."""


def first_boundary_at_or_after(dt_s: Callable[[int], float], m: int, elapsed_s: float) -> int:
    """Smallest ``j`` in ``[1, m]`` with ``dt_s(j) >= elapsed_s`` (bisection; ``dt_s``
    increasing): the iteration boundary at which a worker interrupted ``elapsed_s`` into
    a segment of ``m`` iterations stops."""
    lo, hi = 1, m
    while lo < hi:
        mid = (lo + hi) // 2
        if dt_s(mid) >= elapsed_s:
            hi = mid
        else:
            lo = mid + 1
    return lo


class EngineWorker(ABC):
    """One engine replica (a SimPy process started by the subclass); see the module doc."""

    def __init__(self, env: simpy.Environment, index: int, cost: LinearCost, config: EngineConfig):
        self.env, self.index, self.cost, self.config = env, index, cost, config
        self.busy_s = 0.0
        """Seconds spent running iterations."""
        self.events = 0
        """SimPy timeouts this worker waited on (a cost measure of the simulation)."""
        self.hold: simpy.Event | None = None
        """Set by :meth:`hold_at_boundary`: the worker waits on it at its next boundary."""
        self.stopped: simpy.Event | None = None
        """Fires when the worker has stopped for :attr:`hold`."""
        self._n_streaming = 0  # queued/running requests of batches that are not exclusive
        self._coalescing = False  # an exclusive batch is running: refuse new requests
        self._wakeup = env.event()
        self._abort_marks: set[tuple[int, int]] = set()  # (batch.serial, i) to remove
        self._at_boundary = False  # True only while idle or held: aborts then apply at once
        self.on_free: Callable[[], None] | None = None
        """Called after requests left this worker (finished or aborted): the engine's
        held queue (:mod:`sim.engine.dispatch`) hands over more."""

    @property
    @abstractmethod
    def outstanding(self) -> int:
        """Requests running or waiting on this worker."""

    @abstractmethod
    def progress(self) -> list[tuple[Batch, int, int]]:
        """``(batch, i, tokens generated so far)`` of every running request; exact at an
        iteration boundary (e.g. while held for a weight sync)."""

    @abstractmethod
    def _queue(self, batch: Batch, idx: np.ndarray) -> None:
        """Append requests ``idx`` of ``batch`` to this worker's FIFO queue."""

    @abstractmethod
    def apply_aborts(self, t: float) -> None:
        """Remove the requests marked by :meth:`abort` (called at an iteration boundary,
        time ``t``) and record each with :meth:`Batch.record_abort` (tokens made so far)."""

    def enqueue(self, batch: Batch, idx: np.ndarray) -> None:
        """Queue requests ``idx`` (int array) of ``batch`` in that order (FIFO); wakes the
        worker. Raises RuntimeError while an exclusive batch is running (see
        :class:`~sim.engine.batch.Batch`); a subclass may raise ValueError for a request that can
        never run on it."""
        if self._coalescing:
            raise RuntimeError(
                f"worker {self.index}: a request was submitted while an "
                "exclusive batch was running (see Batch(exclusive=...))"
            )
        batch.worker[idx] = self.index
        self._queue(batch, idx)
        if not batch.coalesce:
            self._n_streaming += len(idx)
        self.wake()

    def wake(self) -> None:
        """Make the worker reach its next iteration boundary and look at hold/abort requests."""
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    @property
    def held(self) -> bool:
        """A hold is set and has not been released."""
        return self.hold is not None and not self.hold.triggered

    def hold_at_boundary(self, hold: simpy.Event) -> simpy.Event:
        """Stop at the next iteration boundary (at once when idle) until ``hold`` fires;
        running requests keep their progress. Returns the event fired once stopped."""
        self.hold, self.stopped = hold, self.env.event()
        self.wake()
        return self.stopped

    def abort(self, batch: Batch, idx: list[int]) -> None:
        """Mark requests ``idx`` of ``batch`` (queued or running here) for removal at the next
        iteration boundary; applied at once if the worker is idle or held."""
        self._abort_marks.update((batch.serial, i) for i in idx)
        if self._at_boundary:
            self.apply_aborts(self.env.now)
            self._freed()
        else:
            self.wake()

    def run(self) -> Generator[Any, Any, None]:
        """Process: the run loop of every worker (module docstring)."""
        env = self.env
        while True:
            if (yield from self._boundary()):
                continue
            if self._n_streaming == 0:
                yield from self._run_exclusive()
                continue
            segment = self._begin_segment()
            if segment is None:
                continue
            m, dt_s, end = segment
            self._wakeup = env.event()
            t0 = env.now
            self.events += 1
            yield env.any_of([env.timeout(dt_s(m)), self._wakeup])
            if env.now < t0 + dt_s(m):  # an arrival: stop at the boundary after now
                m = first_boundary_at_or_after(dt_s, m, env.now - t0)
                yield env.timeout(max(dt_s(m) - (env.now - t0), 0.0))
            self.busy_s += env.now - t0
            for batch, i in end(m, t0):
                batch.finished(i, env.now)
            self._freed()

    @abstractmethod
    def _begin_segment(self) -> Segment | None:
        """At a boundary with streaming work: admit what fits and return ``(m, dt_s, end)``
        (:data:`Segment`), or None when nothing can run yet (the loop looks again)."""

    @abstractmethod
    def _run_exclusive(self) -> Generator[Any, Any, None]:
        """Run everything held to completion in closed form; yield once at the end
        (:meth:`_hold_until`)."""

    def _freed(self) -> None:
        """Requests left this worker: tell the engine (:attr:`on_free`)."""
        if self.on_free is not None:
            self.on_free()

    def _take_abort_marks(self) -> set[tuple[int, int]]:
        """The marks set by :meth:`abort` since the last call (for :meth:`apply_aborts`)."""
        marks, self._abort_marks = self._abort_marks, set()
        return marks

    def _boundary(self):
        """Process step at an iteration boundary: apply aborts, then wait while held or
        idle. Returns True if it waited (the caller then looks again)."""
        if self._abort_marks:
            self.apply_aborts(self.env.now)
            self._freed()
        if self.held:
            self._at_boundary = True
            if not self.stopped.triggered:
                self.stopped.succeed()
            yield self.hold
            self._at_boundary = False
            return True
        if not self.outstanding:
            self._wakeup = self.env.event()
            self._at_boundary = True
            yield self._wakeup
            self._at_boundary = False
            return True
        return False

    def _hold_until(self, t_end: float, finished: list[Batch]):
        """Process step of an exclusive closed-form run: refuse new requests until
        ``t_end``, then count each finished request (one :class:`Batch` entry per request
        in ``finished``) and fire the batches that are done."""
        self._coalescing = True
        self.events += 1
        start = self.env.now
        yield self.env.timeout(t_end - start)
        self._coalescing = False
        self.busy_s += t_end - start
        for batch in finished:
            batch.remaining -= 1
            if batch.remaining == 0:
                batch.done.succeed(batch)
