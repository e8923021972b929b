"""The local level model: a per-step series is a level that wanders as a random walk, seen
through independent noise; the forecast of every later step is the filtered level after
the last fitted step (no trend).

    y[t] = mu[t] + eps[t],        eps[t] ~ N(0, s2)
    mu[t+1] = mu[t] + eta[t],     eta[t] ~ N(0, q s2)

(Durbin & Koopman, *Time Series Analysis by State Space Methods*, 2nd ed. 2012, ch. 2:
the Kalman filter of §2.2, the likelihood of §2.10 with ``s2`` concentrated out, §2.10.2).
The signal-to-noise ratio ``q`` is fitted by maximum likelihood, one ``q`` shared by the
series of a fit (each series its own ``s2``): ``q`` near 0 makes the level the mean of
every fitted step (the static rule), a large ``q`` the last step (persistence with a
window of one); the steady-state Kalman gain ``(-q + sqrt(q^2 + 4q)) / 2`` is the weight
of the newest step. The filter starts at the first value with variance ``s2`` (one
observation's worth).

Why no trend: on the project's earlier graph-walk runs the straight line through the last
50 fit steps of the straggler probability pointed the wrong way in three of four runs
(docs/per_sample.md, "Why the drifting lines lose").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize

LOG_Q_BOUNDS = (-12.0, 6.0)
"""Search range of ``log q``: from a level that never moves (a gain of 0.0025) to one
that follows every step (a gain above 0.95)."""


def filter_level(y: np.ndarray, q: float) -> tuple[np.ndarray, float]:
    """Kalman filter of ``(T, n)`` series ``y`` (``T >= 2``) at signal-to-noise ratio
    ``q``: ``((n,) level after the last step, concentrated negative log likelihood)``
    summed over the series (constants dropped; a series whose one-step errors are all
    zero contributes its variance floor of 1e-12)."""
    y = np.asarray(y, dtype=np.float64)
    a = y[0].copy()
    p = 1.0  # state variance in units of s2; the same for every series
    v2f = np.zeros(y.shape[1])
    log_f = 0.0
    for t in range(1, len(y)):
        p += q
        f = p + 1.0
        v = y[t] - a
        v2f += v * v / f
        log_f += np.log(f)
        gain = p / f
        a = a + gain * v
        p *= 1.0 - gain
    n = len(y) - 1
    s2 = np.maximum(v2f / n, 1e-12)
    nll = 0.5 * float((n * np.log(s2)).sum() + y.shape[1] * log_f)
    return a, nll


@dataclass(frozen=True)
class LocalLevel:
    """A fitted local level model (module docstring)."""

    q: float
    """Signal-to-noise ratio ``var(eta) / var(eps)``."""
    level: np.ndarray
    """``(n,)`` filtered level after the last fitted step: every later step's forecast."""

    @property
    def gain(self) -> float:
        """Steady-state Kalman gain: the weight of the newest step in the level."""
        return float((-self.q + np.sqrt(self.q**2 + 4.0 * self.q)) / 2.0)


def fit_local_level(y: np.ndarray, fit_series: np.ndarray | None = None) -> LocalLevel:
    """Fit ``q`` on the series of ``y`` (``(T,)`` or ``(T, n)``, ``T >= 2`` steps, finite)
    selected by ``fit_series`` (``(n,)`` bool; None or none selected: every series
    that varies), then filter every series at that ``q``. Series that never vary
    contribute nothing to ``q`` (they would pull it to 0 whatever the others do); with
    none varying the level is the last value. Raises ValueError on fewer than 2 steps
    or a non-finite value."""
    y = np.asarray(y, dtype=np.float64)
    y2 = y.reshape(len(y), -1)
    if len(y2) < 2:
        raise ValueError(f"fit_local_level: need at least 2 steps, got {len(y2)}")
    if not np.isfinite(y2).all():
        raise ValueError("fit_local_level: the series hold a NaN or an infinity")
    varies = y2.std(axis=0) > 0
    use = varies if fit_series is None else np.asarray(fit_series).reshape(-1) & varies
    if not use.any():
        use = varies
    if not use.any():
        return LocalLevel(q=0.0, level=y2[-1].reshape(y.shape[1:]))
    res = optimize.minimize_scalar(
        lambda lq: filter_level(y2[:, use], float(np.exp(lq)))[1],
        bounds=LOG_Q_BOUNDS,
        method="bounded",
    )
    q = float(np.exp(res.x))
    level, _ = filter_level(y2, q)
    return LocalLevel(q=q, level=level.reshape(y.shape[1:]))
