"""The cost-free half of an engine's schedule: which worker gets each request
(:func:`assign_workers`) and, on one worker without KV pressure, in which iteration each
request is admitted (:func:`slot_starts`).

Both are shared by the SimPy engine (:mod:`sim.engine.core`), the per-iteration reference
loops (:mod:`tests.reference.engine_loop`, :mod:`tests.reference.kv_loop`), the schedule features of
calibration (:mod:`sim.engine.features`) and the vectorised fast path (:mod:`sim.engine.fastpath`), so
that every one of them dispatches and admits the same way.
"""

from __future__ import annotations

import heapq

import numpy as np
from rolloutlab.sim.engine.config import EngineConfig
from rolloutlab.sim.engine.dispatch import STATIC_DISPATCH


def assign_workers(
    prompt_keys: np.ndarray,
    config: EngineConfig,
    rr: int | np.ndarray = 0,
    load: np.ndarray | None = None,
) -> tuple[np.ndarray, int | np.ndarray]:
    """Worker of each request of one submit, by ``config.dispatch``.

    Args:
        prompt_keys: ``(n,)`` prompt key of each request, in submit order.
        config: ``n_workers`` ``W`` and ``dispatch``.
        rr: the dispatcher's round-robin position(s) in ``0..W-1``; an ``(T,)`` array
            gives the workers of ``T`` submits of the same keys at once.
        load: ``(W,)`` requests outstanding on each worker (``least_loaded``); ``None``
            = an idle engine.
    Returns: ``(worker, rr')``: ``worker`` is ``(n,)`` (or ``(T, n)`` for an array
        ``rr``) ints in ``0..W-1``; ``rr'`` the position for the next submit.

    Rules: ``round_robin`` gives request ``i`` worker ``(rr + i) mod W``; ``group``
    numbers prompts by first appearance and gives prompt ``g`` (all its samples, as
    vLLM does with ``n=G``) worker ``(rr + g) mod W``; ``least_loaded`` gives each request
    in turn the worker with the fewest outstanding requests (lowest index on ties;
    ``rr`` unused and unchanged). Raises ValueError for ``shared`` / ``deferred:T``
    (:mod:`sim.engine.dispatch`: no assignment at submit).
    """
    if config.dispatch not in STATIC_DISPATCH:
        raise ValueError(
            f"dispatch {config.dispatch}: requests are held at the engine and handed to "
            "free slots as they open (sim.engine.dispatch), so there is no assignment at submit; "
            "only the SimPy engine runs it"
        )
    W, n = config.n_workers, len(prompt_keys)
    rr_arr = np.asarray(rr)
    shift = rr_arr[:, None] if rr_arr.ndim else rr  # (T, 1) for T submits at once
    if config.dispatch == "round_robin":
        return (shift + np.arange(n)) % W, (rr + n) % W
    if config.dispatch == "group":
        pos, n_groups = _group_numbers(np.asarray(prompt_keys))
        return (shift + pos) % W, (rr + n_groups) % W
    if load is None or (load == load[0]).all():  # greedy argmin on equal loads: i mod W
        out = np.arange(n) % W
        return (np.broadcast_to(out, (len(rr_arr), n)) if rr_arr.ndim else out), rr
    load = np.array(load, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        w = int(np.argmin(load))
        out[i] = w
        load[w] += 1
    return out, rr


def _group_numbers(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """``(n,)`` number of each request's prompt in order of first appearance, and the
    number of prompts."""
    if len(keys) and (keys[1:] >= keys[:-1]).all():  # sorted (every pipeline): runs
        pos = np.concatenate(([0], np.cumsum(keys[1:] != keys[:-1])))
        return pos, int(pos[-1]) + 1
    _, group = np.unique(keys, return_inverse=True)
    first = np.unique(group, return_index=True)[1]
    order = np.argsort(np.argsort(first))  # groups numbered by first appearance
    return order[group.reshape(-1)], len(first)


def slot_starts(lengths: np.ndarray, slots: int) -> np.ndarray:
    """Admission iteration of each request of one worker's FIFO queue.

    Without KV pressure a request admitted at iteration ``k`` holds its slot for exactly
    ``L`` iterations, so admission into ``slots`` (``max_num_seqs``) slots is list
    scheduling on identical machines: request ``i`` starts when the earliest slot frees.

    Args: ``lengths`` ``(n,)`` response tokens (>= 1), queue order; ``slots`` >= 1.
    Returns: ``(n,)`` int64 admission iterations (0 for the first ``slots``).
    """
    n = len(lengths)
    starts = np.zeros(n, dtype=np.int64)
    if n <= slots:
        return starts
    Ll = np.asarray(lengths).tolist()
    free = Ll[:slots]  # slot free times of the first wave
    heapq.heapify(free)
    for i in range(slots, n):
        t = heapq.heappop(free)
        starts[i] = t
        heapq.heappush(free, t + Ll[i])
    return starts
