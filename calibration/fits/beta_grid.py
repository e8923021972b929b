"""Quadrature over a Beta distribution of pass rates on a uniform grid in logit p
(used by the learning fits, docs/learning.md §3-4)."""

from __future__ import annotations

import math

import numpy as np
from scipy import special


def beta_logit_grid(a: float, b: float, step: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Nodes u (n,) of ``logit p0`` and weights (n,) summing to 1 with
    ``sum w f(u) ~= E_{p0 ~ Beta(a, b)} f(logit p0)``.

    In u the Beta density is ``sigmoid(u)^a sigmoid(-u)^b / B(a, b)``: smooth with
    exponential tails, so a uniform grid (trapezoid rule, spacing ``step``, out to where
    the tails are below e^-25) is accurate for any shift ``u + theta``, also when theta
    is large and the mass that matters sits at p0 ~ e^-theta. A concentrated Beta (large
    a, b) also gets its bulk covered: mode ``log(a/b)`` +- 10 sd (Laplace, ``sd^2 =
    1/a + 1/b``) at a spacing of at most sd / 10.
    """
    half = min(25 / min(a, b), 400.0)
    sd, mode = math.sqrt(1 / a + 1 / b), math.log(a / b)
    step = min(step, sd / 10)
    lo, hi = min(-half, mode - 10 * sd), max(half, mode + 10 * sd)
    u = np.arange(lo, hi + step / 2, step)
    logw = a * special.log_expit(u) + b * special.log_expit(-u)
    w = np.exp(logw - logw.max())
    return u, w / w.sum()
