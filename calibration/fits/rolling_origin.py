"""Choosing among forecasts by how they did inside the fit window: a rolling-origin
backtest, then the candidates weighted by the inverse of their backtest error.

A run's fit steps ``0..K-1`` are cut at several origins ``k`` (:func:`origins`); at each,
every candidate forecasts the mean of the series over steps ``k..K-1`` from steps
``0..k-1`` only, and its error is the mean absolute error over the scored series (the
rolling-origin evaluation of Tashman 2000, *Int. J. Forecasting* 16(4), "Out-of-sample
tests of forecasting accuracy"; Hyndman & Athanasopoulos, *Forecasting: Principles and
Practice*, 3rd ed. 2021, §5.10 "time series cross-validation"). A candidate's backtest
error is its mean over the origins. The forecast of the steps after ``K`` is then the
candidates' forecasts from all ``K`` steps, weighted by ``error**-power`` (normalised to
sum to 1): the inverse-error combination of Bates & Granger 1969 (*Operational Research
Quarterly* 20(4), "The combination of forecasts") and Stock & Watson 2004 (*J.
Forecasting* 23(6), eq. 4, "Combination forecasts of output growth"); ``power = inf``
keeps only the candidate with the least error (selection, ties shared equally).

Why the validation block runs to the end of the fit window (not one step): the forecast
being chosen is of the mean of many later steps (a run's second half), so each origin
scores the candidates at the longest horizon the fit window allows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

ORIGIN_SHARES = (0.5, 0.6, 0.7, 0.8, 0.9)
"""Origins as shares of the fit window ``K``: steps ``0..k-1`` fitted, ``k..K-1`` scored."""


def origins(K: int, shares=ORIGIN_SHARES, min_fit: int = 2) -> list[int]:
    """Ascending distinct origins ``k = round(share * K)``, each kept only when it leaves
    at least ``min_fit`` fit steps and 1 scored step (``min_fit <= k <= K - 1``); empty
    when none does."""
    ks = {int(round(s * K)) for s in shares}
    return sorted(k for k in ks if min_fit <= k <= K - 1)


def backtest_errors(
    y: np.ndarray,
    forecasts_at: Callable[[int], Mapping[str, np.ndarray]],
    ks: list[int],
    scored: Callable[[np.ndarray], np.ndarray] | None = None,
) -> dict[str, float]:
    """Each candidate's mean over origins of its mean absolute error.

    ``y``: ``(K,)`` or ``(K, n)`` per-step values of the fit window; ``forecasts_at(k)``:
    candidate name -> ``(n,)`` (or scalar) forecast of the mean of ``y[k:]`` made from
    ``y[:k]`` only (the caller's promise); ``ks``: origins (:func:`origins`); ``scored``:
    maps the ``(n,)`` block mean to a bool mask of the series scored at that origin (None:
    all). An origin where no series is scored is skipped. Returns NaN for every candidate
    when no origin is left. Raises ValueError on an origin outside ``1..K-1``."""
    y2 = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
    K = len(y2)
    errs: dict[str, list[float]] = {}
    names: list[str] = []
    for k in ks:
        if not 1 <= k <= K - 1:
            raise ValueError(f"backtest_errors: origin {k} outside 1..{K - 1}")
        target = y2[k:].mean(axis=0)
        mask = np.ones(target.shape, bool) if scored is None else np.asarray(scored(target))
        cands = forecasts_at(k)
        names = names or list(cands)
        if not mask.any():
            continue
        for name, f in cands.items():
            f2 = np.broadcast_to(np.asarray(f, dtype=np.float64).reshape(-1), target.shape)
            errs.setdefault(name, []).append(float(np.abs(f2 - target)[mask].mean()))
    if not errs:
        return {n: float("nan") for n in names}
    return {n: float(np.mean(v)) for n, v in errs.items()}


def weights(errors: Mapping[str, float], power: float = 1.0) -> dict[str, float]:
    """Combination weights ``error**-power`` normalised to 1 (module docstring);
    ``power = inf``: 1 on the least error (shared equally on a tie). Candidates with a
    zero error share the weight equally; a NaN error gets weight 0; all NaN: equal
    weights. Raises ValueError on a negative error or ``power <= 0``."""
    if power <= 0:
        raise ValueError(f"weights: power {power} must be > 0")
    e = {n: float(v) for n, v in errors.items()}
    if any(v < 0 for v in e.values()):
        raise ValueError(f"weights: negative error in {e}")
    finite = {n: v for n, v in e.items() if v == v}
    if not finite:
        return {n: 1.0 / len(e) for n in e}
    best = min(finite.values())
    if best == 0.0 or np.isinf(power):
        top = [n for n, v in finite.items() if v == best]
        return {n: (1.0 / len(top) if n in top else 0.0) for n in e}
    raw = {n: (finite[n] ** -power if n in finite else 0.0) for n in e}
    total = sum(raw.values())
    return {n: v / total for n, v in raw.items()}


def combine(forecasts: Mapping[str, np.ndarray], w: Mapping[str, float]) -> np.ndarray:
    """``sum_c w[c] * forecasts[c]`` over the candidates of ``w`` (arrays broadcast).
    Raises KeyError when a candidate of ``w`` has no forecast, ValueError when ``w`` is
    empty."""
    out = None
    for name, wt in w.items():
        term = wt * np.asarray(forecasts[name], dtype=np.float64)
        out = term if out is None else out + term
    if out is None:
        raise ValueError("combine: no candidate")
    return out
