"""Fit the turn-count law of a ``multi_turn`` block (:mod:`sim.models.turn_law`) to the
turns of observed rollouts, the law chosen by likelihood.

Candidates, each by maximum likelihood on the counts ``n_i``:

- ``fixed`` when every rollout has as many turns (nothing else is then considered);
- ``geometric`` on ``{1, 2, ...}`` truncated at the observed maximum ``K`` (1 parameter);
- ``geometric`` on ``{k0, ...}`` with ``k0`` the observed minimum, truncated at ``K``
  (2 parameters: ``p`` and the shift);
- ``empirical``: the observed frequencies of each count (``#distinct - 1`` parameters).

The truncated geometric puts ``P(N = k0 + j) = p (1 - p)^j`` on ``j < K - k0`` and the
rest of the mass, ``(1 - p)^(K - k0)``, on ``K`` (values above ``K`` become ``K``, as
:meth:`sim.models.turn_law.TurnLaw.from_uniform` draws it); ``p`` maximises the
log-likelihood (``scipy.optimize.minimize_scalar``, bounded). The law of least AIC
(``2 k - 2 log L``, Akaike 1974) wins: a geometric law where the counts look geometric,
the table where they do not (the real ``lookup`` task's 2-4 turns, uniform by design).
"""

from __future__ import annotations

import numpy as np
from rolloutlab.sim.models.turn_law import TurnLaw
from scipy import optimize


def _geometric_loglik(n: np.ndarray, k0: int, top: int, p: float) -> float:
    j = n - k0
    ll = np.where(n < top, np.log(p) + j * np.log1p(-p), (top - k0) * np.log1p(-p))
    return float(ll.sum())


def _geometric(n: np.ndarray, k0: int, top: int) -> tuple[float, TurnLaw]:
    """``(log-likelihood, law)`` of the truncated geometric on ``{k0, ..., top}``."""
    if top == k0:
        return 0.0, TurnLaw("geometric", float(k0), top, k0)
    res = optimize.minimize_scalar(
        lambda p: -_geometric_loglik(n, k0, top, p), bounds=(1e-6, 1 - 1e-9), method="bounded"
    )
    p = float(res.x)
    return -float(res.fun), TurnLaw("geometric", k0 - 1 + 1.0 / p, top, k0)


def fit_turn_law(counts: np.ndarray) -> tuple[TurnLaw, dict[str, float]]:
    """The law of least AIC for the turn counts ``counts`` (``(n,)`` integers >= 1) and
    the AIC of every candidate (keys ``fixed``, ``geometric``, ``geometric_min``,
    ``empirical``; module docstring). Raises ValueError on no counts or a count < 1."""
    n = np.asarray(counts, dtype=np.int64)
    if n.size == 0 or (n < 1).any():
        raise ValueError(f"turn counts: need >= 1 rollout with >= 1 turn, got {n.size} rollouts")
    k0, top = int(n.min()), int(n.max())
    if k0 == top:
        return TurnLaw("fixed", float(top), top, top), {"fixed": 0.0}
    values, freq = np.unique(n, return_counts=True)
    probs = freq / n.size
    cands: dict[str, tuple[float, TurnLaw]] = {}
    ll1, g1 = _geometric(n, 1, top)
    cands["geometric"] = (2 * 1 - 2 * ll1, g1)
    if k0 > 1:
        llk, gk = _geometric(n, k0, top)
        cands["geometric_min"] = (2 * 2 - 2 * llk, gk)
    ll_e = float((freq * np.log(probs)).sum())
    emp = TurnLaw(
        "empirical",
        float(n.mean()),
        top,
        k0,
        tuple(int(v) for v in values),
        tuple(float(p) for p in probs),
    )
    cands["empirical"] = (2 * (len(values) - 1) - 2 * ll_e, emp)
    best = min(cands, key=lambda k: cands[k][0])
    return cands[best][1], {k: float(v[0]) for k, v in cands.items()}
