"""Pause/resume and abort of requests in a running :class:`sim.engine.Engine`.

Kept apart from the engine's hot loop (which only calls :func:`apply_aborts` and waits
on ``worker.hold`` at an iteration boundary) so that the asynchronous pipelines
(:mod:`sim.async_pipeline`) need no change to how the engine advances.

Life cycle: :func:`pause` sets one ``hold`` event on every worker and wakes them; each
stops at its next iteration boundary (at once when idle) and fires its ``stopped``
event; running requests keep their progress and continue when :func:`resume` fires
``hold`` (partial rollouts: one rollout spans weight versions). :func:`abort` marks
requests; a worker removes them at its next boundary (at once when idle or held) and
records them in their :class:`sim.engine.Batch` (``aborted``, ``abort_tokens``).
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np
import simpy


def pause(engine) -> simpy.Event:
    """Stop every worker of ``engine`` at its next iteration boundary.

    Returns an event that fires once all have stopped. Submissions while paused are
    queued. Raises RuntimeError if the engine is already paused.
    """
    if any(w.hold is not None and not w.hold.triggered for w in engine.workers):
        raise RuntimeError("Engine.pause: already paused")
    hold = engine.env.event()
    for w in engine.workers:
        w.hold, w.stopped = hold, engine.env.event()
        w.wake()
    return engine.env.all_of([w.stopped for w in engine.workers])


def resume(engine) -> None:
    """Let the workers stopped by :func:`pause` continue now. Raises RuntimeError if not paused."""
    hold = engine.workers[0].hold
    if hold is None or hold.triggered:
        raise RuntimeError("Engine.resume: not paused")
    hold.succeed()


def abort(engine, batch, idx) -> None:
    """Abort requests ``idx`` (ints) of a non-exclusive ``batch``, queued or running.

    Each is removed at its worker's next iteration boundary (at once if the worker is
    idle or paused) and recorded with :meth:`Batch.record_abort`: ``batch.aborted[i]``,
    ``batch.abort_tokens[i]`` (tokens generated so far), ``batch.t_finish[i]`` (abort
    time). A request that finishes at that very boundary counts as finished, not
    aborted; requests already finished or aborted are ignored.
    Raises RuntimeError for an exclusive batch (its times are precomputed).
    """
    if batch.coalesce:
        raise RuntimeError(
            "Engine.abort: an exclusive batch runs in closed form and cannot be aborted"
        )
    for i in np.atleast_1d(np.asarray(idx, dtype=np.int64)).tolist():
        if batch.aborted[i] or not np.isnan(batch.finish_[i]):
            continue
        engine.workers[int(batch.worker[i])]._abort.add((id(batch), i))
    for worker in engine.workers:
        if worker._abort:
            if worker._at_boundary:
                apply_aborts(worker, engine.env.now)
            else:
                worker.wake()


def apply_aborts(worker, t: float) -> None:
    """Remove the marked requests from ``worker``'s running heap and FIFO queue at time
    ``t`` (an iteration boundary) and record them; running ones keep the tokens made
    so far (iterations since admission)."""
    marks, worker._abort = worker._abort, set()
    kept = []
    for finish_k, seq, batch, i in worker.running:
        if (id(batch), i) not in marks:
            kept.append((finish_k, seq, batch, i))
            continue
        k0 = finish_k - batch.resp_[i]  # admission iteration
        worker.n -= 1
        worker.prompt_sum -= batch.prompt_[i]
        worker.k0_sum -= k0
        worker._n_streaming -= 1
        batch.record_abort(i, t, worker.k - k0)
    heapq.heapify(kept)
    worker.running = kept
    chunks = deque()
    for batch, _idx, idx_list, pos in worker.waiting:
        keep = []
        for i in idx_list[pos:]:
            if (id(batch), i) in marks:
                worker.n_waiting -= 1
                worker._n_streaming -= 1
                batch.record_abort(i, t, 0)
            else:
                keep.append(i)
        if keep:
            chunks.append([batch, np.asarray(keep, dtype=np.int64), keep, 0])
    worker.waiting = chunks
