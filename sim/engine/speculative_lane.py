"""One worker's synchronous share with speculative decoding (:mod:`sim.engine.speculative`),
slot scheduling as :class:`sim.engine.slot_worker.Worker` (no KV pressure).

Requests enter ``max_num_seqs`` slots first in, first out; the admitting iteration prefills
(a prompt already prefilled on this worker is free with prefix caching) and emits the first
token. A speculating sequence then needs ``V`` verify steps for its remaining ``r`` tokens
(drawn per step, :func:`sim.engine.speculative.verify_steps`), so it finishes ``V``
iterations later; its context grows ``r / V`` tokens per iteration on average (the cost uses
that mean rate; exact when every step emits the same count). With ``tail_below`` the worker
decodes plainly (one token per iteration) until, at a boundary with nothing queued, fewer
than ``tail_below`` sequences run; from there every running sequence speculates (its
remaining tokens are drawn then). A synchronous step's queue only shrinks, so the switch
happens once.

Between batch changes the running set is fixed: ``m`` iterations from context ``X`` with
rate sum ``R`` cost ``m t_1 + c R m (m - 1) / 2``, ``t_1`` the first iteration
(:meth:`sim.models.cost.LinearCost.segment_from_s` with ``R`` as the growth), priced by
:meth:`~sim.engine.speculative.SpeculativeDecoding.verify_cost` while speculating. Draws come from one
generator per (seed, step, worker), consumed in FIFO order, so the SimPy worker
(:class:`sim.engine.speculative_worker.SpeculativeWorker`) and the fast path (:mod:`sim.engine.fastpath`)
give the same times.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rolloutlab.sim.engine.speculative import SpeculativeDecoding, verify_steps
from rolloutlab.sim.models.cost import LinearCost


@dataclass
class LaneTimes:
    """What :func:`speculative_lane` returns; arrays are (n,) in the share's FIFO order."""

    t_first: np.ndarray
    """Seconds from the lane's start to each request's first token."""
    t_finish: np.ndarray
    """Seconds from the lane's start to each request's end."""
    spec_steps: np.ndarray
    """Verify steps each request took (0 if it never speculated)."""
    drawn: np.ndarray
    """Tokens emitted by those verify steps before the cut at the request's end."""


def speculative_lane(
    L: np.ndarray,
    P: np.ndarray,
    keys: np.ndarray,
    cost: LinearCost,
    max_num_seqs: int,
    prefix_caching: bool,
    speculative: SpeculativeDecoding,
    step: int = 0,
    worker: int = 0,
) -> LaneTimes:
    """Times of one worker's FIFO share ``L`` (response tokens, >= 1), ``P`` (prompt
    tokens), ``keys`` (prompt keys), all (n,), from an idle start at learner step ``step``
    (module doc). Raises ValueError for an empty share or a length < 1."""
    L = np.asarray(L, dtype=np.int64)
    if L.size == 0 or (L < 1).any():
        raise ValueError("speculative_lane: need at least one request, each of >= 1 tokens")
    P = np.asarray(P, dtype=np.float64)
    keys = np.asarray(keys).tolist()
    n_req = len(L)
    rng = np.random.default_rng([speculative.seed, step, worker])
    k, alpha = speculative.k, speculative.alpha_at(step)
    vcost = speculative.verify_cost(cost)
    t_first, t_fin = np.empty(n_req), np.empty(n_req)
    spec_steps = np.zeros(n_req, dtype=np.int64)
    drawn = np.zeros(n_req, dtype=np.int64)
    speculating = speculative.tail_below is None
    idx = np.zeros(0, dtype=np.int64)  # running requests
    fin = np.zeros(0, dtype=np.int64)  # iteration at which each ends
    rate = np.zeros(0)  # context tokens added per iteration
    base = np.zeros(0)  # context = base + rate * iteration
    cached: set = set()
    nxt, it, t = 0, 0, 0.0
    while nxt < n_req or idx.size:
        take = min(max_num_seqs - idx.size, n_req - nxt)
        prefill = 0.0
        if take > 0:
            new = np.arange(nxt, nxt + take)
            nxt += take
            for i in new.tolist():
                if not prefix_caching or keys[i] not in cached:
                    prefill += P[i]
                    cached.add(keys[i])
            V = L[new].astype(np.float64)
            if speculating:  # first token from the prefill, the rest by verify steps
                s, d = verify_steps(rng, L[new] - 1, k, alpha)
                spec_steps[new], drawn[new] = s, d
                V = 1.0 + s
            r = L[new] / V
            idx = np.concatenate((idx, new))
            fin = np.concatenate((fin, it + V.astype(np.int64)))
            rate = np.concatenate((rate, r))
            base = np.concatenate((base, P[new] - r * it))
        if not speculating and nxt == n_req and idx.size < speculative.tail_below:  # type: ignore[operator]
            done_tokens = it - (fin - L[idx])  # plain: one token per iteration since admission
            s, d = verify_steps(rng, L[idx] - done_tokens, k, alpha)
            spec_steps[idx], drawn[idx] = s, d
            rate = (L[idx] - done_tokens) / np.maximum(s, 1)
            base = P[idx] + done_tokens - rate * it
            fin = it + s
            speculating = True
        c = vcost if speculating else cost
        m = int(fin.min()) - it
        R = float(rate.sum())
        first = c.decode_iter_s(idx.size, float(base.sum()) + R * it)
        pre = cost.prefill_s(prefill)
        if take > 0:
            t_first[idx[-take:]] = t + (first + pre)
        t += c.segment_from_s(m, R, first) + pre
        it += m
        ended = fin == it
        t_fin[idx[ended]] = t
        keep = ~ended
        idx, fin, rate, base = idx[keep], fin[keep], rate[keep], base[keep]
    return LaneTimes(t_first, t_fin, spec_steps, drawn)
