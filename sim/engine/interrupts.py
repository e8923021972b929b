"""Pause/resume and abort of requests in a running :class:`sim.engine.core.Engine`.

Kept apart from the engine's hot loop so that the asynchronous pipelines
(:mod:`sim.pipelines.async_pipeline`) need no change to how the engine advances. Uses only the
worker interface (:class:`sim.engine.worker.EngineWorker`), so it works on every kind of
worker (with or without a KV cache).

Life cycle: :func:`pause` gives every worker one ``hold`` event
(:meth:`~sim.engine.worker.EngineWorker.hold_at_boundary`); each stops at its next iteration
boundary (at once when idle) and fires its ``stopped`` event; running requests keep their
progress and continue when :func:`resume` fires ``hold`` (partial rollouts: one rollout
spans weight versions). :func:`abort` hands each worker its requests
(:meth:`~sim.engine.worker.EngineWorker.abort`); a worker removes them at its next boundary (at
once when idle or held) and records them in their :class:`sim.engine.batch.Batch` (``aborted``,
``abort_tokens``).
"""

from __future__ import annotations

import numpy as np
import simpy


def pause(engine) -> simpy.Event:
    """Stop every worker of ``engine`` at its next iteration boundary.

    Returns an event that fires once all have stopped. Submissions while paused are
    queued. Raises RuntimeError if the engine is already paused.
    """
    if any(w.held for w in engine.workers):
        raise RuntimeError("Engine.pause: already paused")
    hold = engine.env.event()
    return engine.env.all_of([w.hold_at_boundary(hold) for w in engine.workers])


def resume(engine) -> None:
    """Let the workers stopped by :func:`pause` continue now. Raises RuntimeError if not paused."""
    if not engine.workers[0].held:
        raise RuntimeError("Engine.resume: not paused")
    engine.workers[0].hold.succeed()


def abort(engine, batch, idx) -> None:
    """Abort requests ``idx`` (ints) of a non-exclusive ``batch``, queued or running.

    Each is removed at its worker's next iteration boundary (at once if the worker is
    idle or paused) and recorded with :meth:`Batch.record_abort`: ``batch.aborted[i]``,
    ``batch.abort_tokens[i]`` (tokens generated so far), ``batch.t_finish[i]`` (abort
    time); one still held at the engine (``shared`` / ``deferred:T`` dispatch) goes at
    once with no token. A request that finishes at that very boundary counts as finished, not
    aborted; requests already finished or aborted are ignored.
    Raises RuntimeError for an exclusive batch (its times are precomputed).
    """
    if batch.coalesce:
        raise RuntimeError(
            "Engine.abort: an exclusive batch runs in closed form and cannot be aborted"
        )
    per_worker: dict[int, list[int]] = {}
    idx = [
        i
        for i in np.atleast_1d(np.asarray(idx, dtype=np.int64)).tolist()
        if not batch.aborted[i] and np.isnan(batch.finish_[i])
    ]
    if engine.held is not None:  # still held at the engine: gone at once, no token made
        for i in engine.held.withdraw(batch, [i for i in idx if batch.worker[i] < 0]):
            batch.record_abort(i, engine.env.now, 0)
    for i in idx:
        if batch.worker[i] >= 0:
            per_worker.setdefault(int(batch.worker[i]), []).append(i)
    for w in sorted(per_worker):
        engine.workers[w].abort(batch, per_worker[w])
