"""Fit of speculative decoding's acceptance drift (:mod:`sim.engine.speculative`) to
measured tokens per verify step.

Model: ``alpha(d) = alpha0 exp(-d / drift_scale)``, ``d`` = learner steps since the drafter
was refreshed times the learning rate, and ``E[T] = (1 - alpha^(k+1)) / (1 - alpha)``
tokens per verify step (Leviathan et al. 2023, eq. 1). Input: per measurement the drift
``d``, the verify steps counted and the tokens they emitted (vLLM's ``speculative``
counters: ``num_drafts`` and ``num_drafts + num_accepted_tokens``). Weighted least squares
on the mean tokens per step (weights: the steps counted), ``scipy.optimize.least_squares``
with ``alpha0`` in [0, 1) and ``log drift_scale`` free.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares


@dataclass(frozen=True)
class DriftFit:
    """Result of :func:`fit_acceptance_drift`."""

    alpha0: float
    """Acceptance right after a refresh."""
    drift_scale: float
    """Drift (steps x lr) that divides alpha by e (inf: no measurable decay)."""
    rmse: float
    """Root mean square error of the mean tokens per step (tokens)."""


def expected_tokens(alpha: np.ndarray, k: int) -> np.ndarray:
    """``(1 - alpha^(k+1)) / (1 - alpha)`` elementwise (``k + 1`` at ``alpha = 1``)."""
    a = np.asarray(alpha, dtype=np.float64)
    return np.sum([a**j for j in range(k + 1)], axis=0)


def fit_acceptance_drift(
    drift: np.ndarray, steps: np.ndarray, tokens: np.ndarray, k: int
) -> DriftFit:
    """Fit ``alpha0, drift_scale`` (module doc) to ``(n,)`` arrays: drift ``steps x lr``
    (>= 0), verify steps counted (> 0) and tokens they emitted (``steps <= tokens <=
    (k + 1) steps``). Raises ValueError for arrays of unequal length, fewer than 2 points,
    ``k < 1`` or counts outside those bounds."""
    d, n, t = (np.asarray(x, dtype=np.float64) for x in (drift, steps, tokens))
    if not (d.shape == n.shape == t.shape) or d.ndim != 1 or d.size < 2 or k < 1:
        raise ValueError(
            "fit_acceptance_drift: need >= 2 points of equal-length 1-d arrays and k >= 1"
        )
    if (d < 0).any() or (n <= 0).any() or (t < n).any() or (t > (k + 1) * n).any():
        raise ValueError(
            "fit_acceptance_drift: need drift >= 0, steps > 0, steps <= tokens <= (k+1) steps"
        )
    mean, w = t / n, np.sqrt(n / n.sum())

    def resid(p):
        alpha = p[0] * np.exp(-d * np.exp(-p[1]))
        return w * (expected_tokens(alpha, k) - mean)

    a0 = float(np.clip(1 - 1 / mean.max(), 0.0, 0.999))
    span = max(float(d.max()), 1e-12)
    res = least_squares(resid, x0=[a0, np.log(span)], bounds=([0.0, -50.0], [0.999999, 50.0]))
    rmse = float(np.sqrt(np.mean((resid(res.x) / w) ** 2)))
    return DriftFit(float(res.x[0]), float(np.exp(res.x[1])), rmse)
