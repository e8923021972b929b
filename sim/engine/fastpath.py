"""Vectorised numpy synchronous pipeline for engines without KV pressure.

Without a KV limit or token budget, which iteration a request is admitted in and
finishes in does not depend on costs: per worker, requests enter ``max_num_seqs``
slots first-in first-out as slots free (list scheduling on integer iteration counts).
Times then follow from the per-iteration cost ``a + b n_k + c ctx_k + p prefill_k``
(:mod:`sim.models.cost`) by a cumulative sum. A worker whose share fits in one wave (the
common case) needs no per-iteration array: between two distinct finishing lengths
``e_{j-1} < e_j`` the batch is fixed, and the segment costs
``m (a + b n + c P) + c n (m e_{j-1} + m (m - 1) / 2)``, ``m = e_j - e_{j-1}``, as in
:mod:`sim.engine.core`; that form is evaluated for many (step, worker) lanes at once.
Results equal the SimPy engine (:func:`sim.engine.core.generate`) to float rounding; the
SimPy engine stays the reference and the only one for KV pressure and async pipelines.
The synchronous pipeline built on these kernels is :mod:`sim.pipelines.sync_fast`.
"""

from __future__ import annotations

import numpy as np
from rolloutlab.sim.engine.config import EngineConfig
from rolloutlab.sim.engine.schedule import assign_workers, slot_starts
from rolloutlab.sim.engine.speculative_lane import speculative_lane
from rolloutlab.sim.models.cost import LinearCost


def one_wave_lanes(
    lane: np.ndarray, L: np.ndarray, P: np.ndarray, prefill_tokens: np.ndarray, cost: LinearCost
) -> tuple[np.ndarray, np.ndarray]:
    """Times of lanes whose requests all start at iteration 0 (one wave per lane).

    Args: ``lane`` (m,) lane index of each request in ``0..n_lanes-1``; ``L`` (m,)
    response tokens (>= 1); ``P`` (m,) prompt tokens; ``prefill_tokens`` (n_lanes,)
    tokens prefilled in each lane's first iteration.
    Returns ``(t_first, t_finish)``, (m,) seconds from the lane's start.
    """
    c = cost
    order = np.lexsort((L, lane))  # by lane, then length
    ls, Ls, Ps = lane[order], L[order].astype(np.float64), P[order].astype(np.float64)
    n_lanes = len(prefill_tokens)
    count = np.bincount(lane, minlength=n_lanes)
    first = np.concatenate(([0], np.cumsum(count)[:-1]))  # (n_lanes,) start index
    pos = np.arange(len(order)) - first[ls]  # position in lane
    lane_P = np.bincount(lane, weights=P, minlength=n_lanes)
    P_left = lane_P[ls] - (np.cumsum(Ps) - Ps - np.concatenate(([0.0], np.cumsum(Ps)))[first[ls]])
    prev = np.where(pos > 0, np.concatenate(([0.0], Ls[:-1])), 0.0)
    m = Ls - prev  # (m,) iterations of this request's segment (0 for ties)
    n_left = (count[ls] - pos).astype(np.float64)
    seg = c.segment_s(m, n_left, P_left, prev)
    cum = np.cumsum(seg)
    base = np.concatenate(([0.0], cum))[first[ls]]
    pre = c.prefill_s(prefill_tokens)
    t_fin = np.empty(len(order))
    t_fin[order] = cum - base + pre[ls]
    t_first_lane = c.decode_iter_s(count, lane_P) + pre
    return t_first_lane[lane], t_fin


def one_wave_matrix(
    L: np.ndarray, P: np.ndarray, prefill_tokens: np.ndarray, cost: LinearCost
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`one_wave_lanes` for lanes of equal size: ``L, P`` (n_lanes, k),
    ``prefill_tokens`` (n_lanes,); returns ``(t_first (n_lanes,), t_finish (n_lanes, k))``
    (why: a row-wise sort and cumsum beat one big lexsort several-fold).

    Segment ``j`` (``m`` iterations, ``n`` running, ``P_left`` their prompt tokens, the
    previous finish at ``e``) costs ``m (a + b n + c P_left + c n (2 e + m - 1) / 2)``, the
    form of :func:`one_wave_lanes` (:meth:`sim.models.cost.LinearCost.segment_s`) with ``m``
    factored out; arrays are updated in place (why: a sweep's blocks are ~10^5 requests
    and each extra pass costs as much as a sort). The factored form rounds differently
    from ``segment_s`` in the last bits, so it stays written out here.
    """
    c, k = cost, L.shape[1]
    order = np.argsort(L, axis=1)
    Ls = np.sort(L, axis=1).astype(np.float64)
    n_left = (k - np.arange(k)).astype(np.float64)  # (k,) running during segment j
    if (P == P[:, :1]).all():  # one prompt length per lane (every built-in scenario)
        per = c.a_s + (c.b_s + c.c_s * P[:, :1].astype(np.float64)) * n_left  # (n_lanes | 1, k)
    else:
        Ps = np.take_along_axis(P, order, 1).astype(np.float64)
        per = c.decode_iter_s(n_left, np.cumsum(Ps[:, ::-1], axis=1)[:, ::-1])
    m = Ls.copy()  # (n_lanes, k) iterations of each segment (0 for ties)
    m[:, 1:] -= Ls[:, :-1]
    seg = Ls + Ls  # 2 e_j - m - 1 = 2 e_{j-1} + m - 1
    seg -= m
    seg -= 1.0
    seg *= 0.5 * c.c_s * n_left
    seg += per
    seg *= m
    pre = c.prefill_s(prefill_tokens)
    cum = np.cumsum(seg, axis=1, out=seg)
    cum += pre[:, None]
    t_fin = np.empty_like(Ls)
    np.put_along_axis(t_fin, order, cum, 1)
    return c.decode_iter_s(k, P.sum(axis=1)) + pre, t_fin


def multi_wave_lane(
    L: np.ndarray,
    P: np.ndarray,
    keys: np.ndarray,
    cost: LinearCost,
    max_num_seqs: int,
    prefix_caching: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Times of one worker's FIFO share ``L, P, keys`` (k,) from an idle start, any size.

    Admission iterations come from list scheduling on ``max_num_seqs`` slots; iteration
    ``k`` then costs ``a + b n_k + c ctx_k + p prefill_k`` and times are its cumsum.
    Returns ``(t_first, t_finish)`` (k,) seconds from the start.
    """
    k_req = len(L)
    start = slot_starts(L, max_num_seqs)
    end = start + L  # exclusive: last iteration is end - 1
    K = int(end.max())
    n_k = np.cumsum(np.bincount(start, minlength=K + 1) - np.bincount(end, minlength=K + 1))[:K]
    w = (P - start).astype(np.float64)
    s_k = np.cumsum(
        np.bincount(start, weights=w, minlength=K + 1)
        - np.bincount(end, weights=w, minlength=K + 1)
    )[:K]
    ctx = s_k + np.arange(K) * n_k  # sum over running of P + (k - start)
    if prefix_caching:
        _, first_of_key = np.unique(keys, return_index=True)
        pay = np.zeros(k_req, dtype=bool)
        pay[first_of_key] = True
    else:
        pay = np.ones(k_req, dtype=bool)
    pre = np.bincount(start[pay], weights=P[pay].astype(np.float64), minlength=K)
    T = np.cumsum(cost.iteration_s(n_k, ctx, pre))
    return T[start], T[end - 1]


def step_times(
    lengths: np.ndarray,
    prompt_tokens: np.ndarray,
    cost: LinearCost,
    config: EngineConfig,
    rr: int = 0,
    step: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """One synchronous generation phase from time 0, as :func:`sim.engine.core.generate`.

    Args: ``lengths`` (n_prompts, G) tokens; ``prompt_tokens`` (n_prompts,); ``rr`` the
    dispatcher's round-robin position; ``step`` the learner step (speculative decoding's
    draws, ``config.speculative``: each worker's share is timed by
    :func:`sim.engine.speculative_lane.speculative_lane`, as the SimPy engine does). Returns ``(worker, t_first, t_finish, rr')`` with
    flat (n_prompts * G,) arrays. Raises ValueError for a paged config (KV pressure:
    use the SimPy engine).
    """
    if config.paged:
        raise ValueError(
            "fast path: KV blocks / token budget need the SimPy engine (--engine simpy)"
        )
    lengths = np.asarray(lengths, dtype=np.int64)
    n_prompts, G = lengths.shape
    keys = np.repeat(np.arange(n_prompts), G)
    worker, rr = assign_workers(keys, config, rr)
    L = lengths.ravel()
    P = np.repeat(np.asarray(prompt_tokens, dtype=np.int64), G)
    t_first, t_fin = np.empty(L.size), np.empty(L.size)
    if config.speculative is not None:
        for w in np.unique(worker).tolist():
            idx = np.flatnonzero(worker == w)
            lane = speculative_lane(
                L[idx], P[idx], keys[idx], cost, config.max_num_seqs, config.prefix_caching,
                config.speculative, step=step, worker=w,
            )  # fmt: skip
            t_first[idx], t_fin[idx] = lane.t_first, lane.t_finish
        return worker, t_first, t_fin, rr
    count = np.bincount(worker, minlength=config.n_workers)
    big = count > config.max_num_seqs
    for w in np.flatnonzero(big):
        idx = np.flatnonzero(worker == w)
        t_first[idx], t_fin[idx] = multi_wave_lane(
            L[idx], P[idx], keys[idx], cost, config.max_num_seqs, config.prefix_caching
        )
    small = ~big[worker]
    if small.any():
        lane = worker[small]
        pre = _first_wave_prefill(lane, keys[small], P[small], config)
        t_first[small], t_fin[small] = one_wave_lanes(lane, L[small], P[small], pre, cost)
    return worker, t_first, t_fin, rr


def _first_wave_prefill(lane, keys, P, config) -> np.ndarray:
    """(n_lanes,) prompt tokens prefilled in each lane's first iteration."""
    n_lanes = int(lane.max()) + 1
    if not config.prefix_caching:
        return np.bincount(lane, weights=P, minlength=n_lanes)
    _, first = np.unique(
        lane * (int(keys.max()) + 1) + keys, return_index=True
    )  # one per (lane, key)
    return np.bincount(lane[first], weights=P[first], minlength=n_lanes)


def block_times(
    lengths: np.ndarray,
    prompt_tokens: np.ndarray,
    cost: LinearCost,
    config: EngineConfig,
    rr: int = 0,
    step: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """:func:`step_times` of ``T`` consecutive steps with one ``G`` in one call.

    ``lengths`` (T, n_prompts, G); ``step`` the learner step of the first. Returns ``worker, t_first, t_finish`` (T, n_prompts * G)
    (seconds from each step's start) and the final ``rr``. Lanes are (step, worker) pairs;
    when every lane fits in one wave they are computed together (why: the per-call numpy
    overhead, not the arithmetic, dominates small steps).
    """
    T, n_prompts, G = lengths.shape
    W, n = config.n_workers, n_prompts * G
    keys = np.repeat(np.arange(n_prompts), G)
    _, advance = assign_workers(keys, config)  # round-robin position moved by one submit
    rrs = rr + np.arange(T) * advance  # (T,) position at each step's submit (modulo W)
    rr_out = int(assign_workers(keys, config, int(rrs[-1]))[1])
    if (
        W == 1 and n <= config.max_num_seqs and config.speculative is None
    ):  # lanes are steps, already of equal size
        tokens = np.asarray(prompt_tokens, dtype=np.int64)
        pre = np.full(T, float(tokens.sum()) * (1 if config.prefix_caching else G))
        P = np.broadcast_to(np.repeat(tokens, G), (T, n))
        t_first, t_fin = one_wave_matrix(lengths.reshape(T, n), P, pre, cost)
        return (
            np.zeros((T, n), dtype=np.int64),
            np.repeat(t_first[:, None], n, axis=1),
            t_fin,
            rr_out,
        )
    worker, _ = assign_workers(keys, config, rrs)  # (T, n)
    if (
        config.speculative is not None
        or np.bincount(worker[0], minlength=W).max() > config.max_num_seqs
    ):
        out = [
            step_times(lengths[s], prompt_tokens, cost, config, int(rrs[s]), step + s)[1:3]
            for s in range(T)
        ]
        return worker, np.stack([o[0] for o in out]), np.stack([o[1] for o in out]), rr_out
    lane = (np.arange(T)[:, None] * W + worker).ravel()
    P = np.tile(np.repeat(np.asarray(prompt_tokens, dtype=np.int64), G), T)
    if config.prefix_caching:  # each prompt once per lane that holds one of its samples
        held = np.zeros((T * W, n_prompts), dtype=bool)
        held[lane, np.tile(np.repeat(np.arange(n_prompts), G), T)] = True
        pre = held @ np.asarray(prompt_tokens, dtype=np.float64)
    else:
        pre = np.bincount(lane, weights=P, minlength=T * W)
    t_first, t_fin = one_wave_lanes(lane, lengths.reshape(-1), P, pre, cost)
    return worker, t_first.reshape(T, n), t_fin.reshape(T, n), rr_out
