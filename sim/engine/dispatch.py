"""Dispatch that holds requests at the engine: ``shared`` and ``deferred:T``.

The static dispatch rules (``round_robin``, ``least_loaded``, ``group``:
:func:`sim.engine.schedule.assign_workers`) tie every request to a worker when it is submitted.
A long request then waits behind others on its worker while another worker sits idle:
with 2 single-slot workers at 1 s per token and groups of lengths ``(10, 1) x 3``,
``round_robin`` puts the three 10s on one worker (makespan 30 s) and ``least_loaded``
(loads counted at submit) does the same.

- ``shared``: one FIFO queue at the engine hands each free slot the next request (a
  worker is given a request while it has fewer than ``max_num_seqs`` outstanding). Each
  slot works as one machine of Graham's list scheduling (Graham 1969, "Bounds on
  multiprocessing timing anomalies"): with ``K`` single-slot workers and a cost per
  iteration that does not depend on the batch, ``max(sum/K, max) <= makespan <=
  sum/K + max`` (the example above: 21 s, bound 26.5 s). Samples of one prompt may land
  on different workers, each of which then prefills the prompt (no shared prefix).
- ``deferred:T`` (``T >= 1``): as ``shared``, but a worker is handed requests while it has
  fewer than ``max_num_seqs + T`` outstanding, i.e. at most ``T`` of them waiting for a
  slot there (a small local queue hides the hand-over latency of a real router; the
  simulator charges none). It is not list scheduling: a request may wait behind a long
  one on its worker while another worker is free, or luckily not (in the example above
  ``deferred:1`` gives 20 s).

When several workers have room the one with the fewest outstanding requests gets the
next request (lowest index on ties). The queue is fed whenever a request is submitted,
finishes or is aborted (:meth:`HeldQueue.feed`).
"""

from __future__ import annotations

from collections import deque

import numpy as np

STATIC_DISPATCH = ("round_robin", "least_loaded", "group")
"""Rules that assign a worker at submit (:func:`sim.engine.schedule.assign_workers`)."""

HELD_DISPATCH = ("shared", "deferred")
"""Rules that hold requests at the engine (this module)."""


def parse_dispatch(spec: str) -> tuple[str, int]:
    """``(kind, T)`` of a dispatch spec: a static rule (``T = 0``), ``shared`` (``T = 0``)
    or ``deferred:T`` with an integer ``T >= 1``.

    Raises: ValueError naming the spec on an unknown rule or a bad ``T``.
    """
    kind, sep, arg = str(spec).strip().partition(":")
    if kind in STATIC_DISPATCH + ("shared",) and not sep:
        return kind, 0
    if kind == "deferred" and sep:
        if not arg.strip().lstrip("+-").isdigit() or int(arg) < 1:
            raise ValueError(
                f"dispatch {spec!r}: T must be an integer >= 1 (requests a worker may hold "
                f"waiting for a slot), got {arg!r}"
            )
        return kind, int(arg)
    raise ValueError(
        f"dispatch {spec!r}: expected one of round_robin, least_loaded, group, shared, deferred:T"
    )


def is_held(spec: str) -> bool:
    """The spec holds requests at the engine (``shared`` or ``deferred:T``)."""
    return parse_dispatch(spec)[0] in HELD_DISPATCH


class HeldQueue:
    """The engine-side FIFO of ``shared`` / ``deferred:T`` dispatch (module docstring)."""

    def __init__(self, workers: list, max_num_seqs: int, T: int):
        self.workers, self.limit = workers, max_num_seqs + T
        self.queue: deque[tuple[object, int]] = deque()  # (batch, request index)

    def __len__(self) -> int:
        return len(self.queue)

    def put(self, batch, n: int) -> None:
        """Hold requests ``0..n-1`` of ``batch``, in order; then :meth:`feed`."""
        self.queue.extend((batch, i) for i in range(n))
        self.feed()

    def feed(self) -> None:
        """Hand held requests, in order, to workers with room until none has or none is left."""
        while self.queue:
            loads = [w.outstanding for w in self.workers]
            w = int(np.argmin(loads))
            if loads[w] >= self.limit:
                return
            batch, i = self.queue.popleft()
            self.workers[w].enqueue(batch, np.array([i], dtype=np.int64))

    def withdraw(self, batch, idx: list[int]) -> list[int]:
        """Remove requests ``idx`` of ``batch`` still held; return those removed (never
        given to a worker)."""
        marks = set(idx)
        kept: deque[tuple[object, int]] = deque()
        removed = []
        for b, i in self.queue:
            if b is batch and i in marks:
                removed.append(i)
            else:
                kept.append((b, i))
        self.queue = kept
        return removed
