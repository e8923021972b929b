"""Laws of the within-group noise ``e`` of log response length (``log X = mu + sigma_prompt
z + sigma_within e``, :class:`sim.models.lengths.LognormalLengths`), each standardised to mean 0
and variance 1 (except ``t``) so that ``sigma_within`` stays the within-group standard deviation of log
length and the ICC keeps its meaning.

* ``normal``: ``e ~ N(0, 1)`` (lognormal lengths within a group).
* ``t``: ``e ~ Student-t(df)`` (log-t lengths; heavy in both tails of log length). With
  ``df <= 2`` it has no variance, so here ``sigma_within`` is a *scale*, not a standard
  deviation, and the ICC computed from it is a scale ratio. ``df`` is fitted.
* ``gumbel``: ``e = (g - gamma) / a``, ``g`` a standard Gumbel (maximum) variable with CDF
  ``exp(-exp(-g))``, ``gamma`` Euler's constant (its mean), ``a = pi / sqrt(6)`` (its
  standard deviation) (NIST/SEMATECH e-Handbook of Statistical Methods §1.3.6.6.16).
  Right-skewed in log length: ``P(X > x)`` falls like a power of ``x`` (a Pareto-like
  tail of index ``a / sigma_within``), the long searches of a group; the left tail is
  light.

Sampling maps a standard normal draw ``z`` through ``e = F^{-1}(Phi(z))`` (monotone), so
the counter-based normal draws of :mod:`sim.models.hashrng` keep their common random numbers
under any law. The fit (:mod:`calibration.fits.groups_fit`) uses :func:`log_interval`.
"""

from __future__ import annotations

import numpy as np
from rolloutlab.sim.models import special

LAWS = ("normal", "gumbel", "t")
"""Within-group laws, by name."""

_A = np.pi / np.sqrt(6.0)
_GAMMA = float(np.euler_gamma)
_MEDIAN = {"normal": 0.0, "gumbel": (-np.log(np.log(2.0)) - _GAMMA) / _A, "t": 0.0}


def check_law(law: str, df: float = 0.0) -> None:
    """Raises ValueError when ``law`` is not one of :data:`LAWS`, or is ``t`` without a
    finite ``df > 0``."""
    if law not in LAWS:
        raise ValueError(f"within-group law: expected one of {', '.join(LAWS)}, got {law!r}")
    if law == "t" and not (np.isfinite(df) and df > 0):
        raise ValueError(f"within-group law t: degrees of freedom must be > 0, got {df!r}")


def from_normal(z: np.ndarray, law: str, df: float = 0.0) -> np.ndarray:
    """``F^{-1}(Phi(z))`` of ``law`` (same shape as ``z``; ``normal``: ``z`` itself).
    Gumbel: ``g = -log(-log Phi(z))`` with ``log Phi`` from :func:`scipy.special.log_ndtr`
    (accurate in both tails); t: ``-sign(z) stdtrit(df, Phi(-|z|))`` (the symmetric
    law's quantile from the smaller tail probability, :func:`scipy.special.stdtrit`)."""
    if law == "normal":
        return z
    check_law(law, df)
    if law == "t":
        return -np.sign(z) * special.stdtrit(df, special.ndtr(-np.abs(z)))
    return (-np.log(-special.log_ndtr(z)) - _GAMMA) / _A


def _logcdf(x: np.ndarray, law: str, df: float) -> np.ndarray:
    if law == "normal":
        return special.log_ndtr(x)
    if law == "t":
        return np.log(special.stdtr(df, x))
    return -np.exp(-(_GAMMA + _A * x))


def _logsf(x: np.ndarray, law: str, df: float) -> np.ndarray:
    if law == "normal":
        return special.log_ndtr(-x)
    if law == "t":
        return np.log(special.stdtr(df, -x))
    return np.log(-np.expm1(-np.exp(-(_GAMMA + _A * x))))


def log_interval(lo: np.ndarray, hi: np.ndarray, law: str, df: float = 0.0) -> np.ndarray:
    """``log(F(hi) - F(lo))`` of the standardised ``law`` (``df``: the t's degrees of
    freedom), elementwise (``lo < hi``; ``lo = -inf`` and ``hi = inf`` allowed): the
    difference of CDFs below the law's median, of survival functions above it, so that
    neither tail loses precision. The t's CDF is :func:`scipy.special.stdtr` (about ten
    times slower than the normal's)."""
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        upper = lo > _MEDIAN[law]
        lcb, lca = _logcdf(hi, law, df), _logcdf(lo, law, df)
        lsa, lsb = _logsf(lo, law, df), _logsf(hi, law, df)
        head = np.where(upper, lsa, lcb)
        diff = np.where(upper, lsb - lsa, lca - lcb)
        return head + np.log(-np.expm1(np.minimum(diff, -1e-300)))
