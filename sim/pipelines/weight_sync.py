"""Weight sync from the learner to the generators, in three modes, and the resumption of
rollouts it (or a chunk boundary) left unfinished.

A sync has three parts, the step table's ``sync_pause_s, sync_drain_s, sync_transfer_s``
(``sync_time`` is their sum):

- **drain** (``drain`` mode only): no new request is submitted and the sync waits until
  every in-flight rollout has finished, so it grows with the longest one in flight
  (verl/slime without partial rollout; public reports show this wait growing from
  seconds to tens of minutes as responses lengthen, FIELD.md);
- **pause**: the generators stop at their next decode-iteration boundary;
- **transfer**: ``cost.weight_sync_s()`` = constant + tensors x per-tensor latency +
  bytes / bandwidth (:mod:`sim.models.cost`).

Modes (:data:`sim.pipelines.spec.SYNC_MODES`):

- ``inflight`` (default; what every pipeline did before the modes existed): pause,
  transfer, resume; running rollouts keep their KV cache and go on under the new weights
  (PipelineRL's in-flight update), so one rollout's tokens span versions;
- ``drain``: drain, pause, transfer; nothing is in flight across the sync;
- ``abort``: pause, abort every running rollout (tokens kept), transfer, then resubmit
  each as prompt + prefix with the KV cache recomputed (AReaL's interruptible rollouts;
  :class:`sim.pipelines.segments.Rollouts`).

With colocated placement the engine is already paused for training when the sync
starts; ``drain`` then lets it run again until the in-flight rollouts finish.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from rolloutlab.sim.pipelines.segments import Rollouts


@dataclass(frozen=True)
class SyncParts:
    """Seconds of one weight sync, by part (module doc)."""

    pause_s: float = 0.0
    drain_s: float = 0.0
    transfer_s: float = 0.0

    @property
    def total_s(self) -> float:
        """``sync_time``: transfer + pause + drain (zero parts not added, so that the
        inflight mode's total equals the pipelines' former ``weight_sync_s + wait`` bit
        for bit)."""
        total = self.transfer_s + self.pause_s if self.pause_s > 0 else self.transfer_s
        return total + self.drain_s if self.drain_s > 0 else total

    def as_tuple(self) -> tuple[float, float, float]:
        """``(pause, drain, transfer)`` for :func:`sim.pipelines.sync.step_record`."""
        return (self.pause_s, self.drain_s, self.transfer_s)


@dataclass
class Resumer:
    """Rows of :class:`~sim.pipelines.segments.Rollouts` records waiting to be launched again:
    paused at a chunk boundary (:meth:`park`) or interrupted by an ``abort`` sync."""

    waiting: list[tuple[Rollouts, int]] = field(default_factory=list)
    resumed: int = 0
    """Rows launched again so far (one count per continuation)."""

    def park(self, record: Rollouts, i: int, t: float) -> None:
        """``on_pause`` callback of a record: row ``i`` stopped at a chunk boundary."""
        self.waiting.append((record, i))

    def add(self, record: Rollouts, rows: np.ndarray) -> None:
        """Rows of ``record`` interrupted by a sync."""
        self.waiting.extend((record, int(i)) for i in rows.tolist())

    def relaunch(self) -> bool:
        """Launch every waiting row that is still unfinished and not discarded, one engine
        batch per record; returns whether any was launched."""
        by_record: dict[int, tuple[Rollouts, list[int]]] = {}
        for rec, i in self.waiting:
            if np.isnan(rec.finish_[i]) and not rec._discarded[i]:
                by_record.setdefault(id(rec), (rec, []))[1].append(i)
        self.waiting = []
        for rec, rows in by_record.values():
            rec.launch(rows)
            self.resumed += len(rows)
        return bool(by_record)


def in_flight_batches(batches) -> list:
    """Engine batches of the pipeline's ``BatchInfo`` list with requests still queued
    or running (what a drain waits for)."""
    live = []
    for info in batches:
        b = info.batch
        if isinstance(b, Rollouts):
            live.extend(b.live_segments())
        elif b.remaining > 0:
            live.append(b)
    return live


def submit_batch(sim, keys, prompt_tokens, lengths):
    """Submit a dispatched batch's requests for pipeline simulation ``sim``: a plain
    engine batch, or a :class:`~sim.pipelines.segments.Rollouts` record where rollouts may be
    resumed (``abort`` sync, ``partial:S:chunk=T``; launched now) or are launched one
    group at a time (``async``; not launched here, :mod:`sim.pipelines.async_stream`)."""
    pc = sim.pc
    if pc.kind != "async" and pc.sync_mode != "abort" and pc.chunk is None:
        return sim.engine.submit(keys, prompt_tokens, lengths, on_finish=sim._on_finish)
    rec = Rollouts(
        sim.engine, keys, prompt_tokens, lengths, sim._on_finish, pc.chunk, sim.resumer.park
    )
    if pc.kind != "async":
        rec.launch(np.arange(len(lengths)))
    return rec


def weight_sync(sim, paused: bool):
    """SimPy generator of one weight sync of pipeline simulation ``sim`` (an
    :mod:`sim.pipelines.async_pipeline` simulation: ``env``, ``engine``, ``sc.cost``, ``pc``,
    ``batches``, ``holding``, ``resumer``); ``paused``: the engine is already paused
    (colocated training). Returns ``(paused, SyncParts)``; the engine is left paused.
    The caller sets the new version, then calls :func:`after_sync`."""
    env, engine, mode = sim.env, sim.engine, sim.pc.sync_mode
    t0 = env.now
    if mode == "drain":
        sim.holding = True  # the dispatcher submits nothing until after_sync
        live = in_flight_batches(sim.batches)
        if live:
            if paused:
                engine.resume()
                paused = False
            yield env.all_of([b.done for b in live])
    t1 = env.now
    if not paused:
        yield engine.pause()  # generators stop at an iteration boundary
        paused = True
    t2 = env.now
    if mode == "abort":
        for info in sim.batches:
            if isinstance(info.batch, Rollouts):
                sim.resumer.add(info.batch, info.batch.interrupt())
    transfer = sim.sc.cost.weight_sync_s()
    yield env.timeout(transfer)
    return paused, SyncParts(pause_s=t2 - t1, drain_s=t1 - t0, transfer_s=transfer)


def after_sync(sim) -> None:
    """After the generators got version ``sim.v_gen``: let the dispatcher submit again
    and launch the rollouts waiting for new weights (interrupted or at a chunk
    boundary); the engine runs them once the learner resumes it. A simulation with a
    ``_new_version()`` method (:class:`sim.pipelines.async_stream.StreamSimulation`) is told."""
    sim.holding = False
    sim.resumer.relaunch()
    new_version = getattr(sim, "_new_version", None)
    if new_version is not None:
        new_version()
