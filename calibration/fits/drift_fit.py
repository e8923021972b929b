"""A length model that moves with training: straight lines in the step through each
quantile of a run's log response lengths and through its within-prompt correlation,
fitted on the first steps, extrapolated to later ones.

Per fit step ``t`` the model summarises the step's ``B*G`` lengths by

* ``q[t, k]``: the log of the pooled lengths' quantile at level ``(k + 1/2) / M``, with
  ``M`` the fewest lengths of a fit step (``B*G``), so a row is the step's sorted lengths
  (order statistics) and its top level is the step's longest response — the mean, the
  spread, the tail and the share at the cap are all read off these rows (a coarser grid
  cannot draw the step's longest responses: with 64 levels of 256 lengths the top level
  is the 0.992 quantile, and the forecast makespan fell to half the measured one);
* ``rho[t]``: the one-way ANOVA ICC of the step's normal scores
  (:func:`calibration.fits.transfer.normal_score_icc`), the within-prompt correlation.

Each level ``k`` gets its own line ``q[t, k] = a_k + b_k (t - t0) + s_k e``, ``e ~ N(0, 1)``,
fitted by maximum likelihood with the quantiles at the cap right-censored there (a Tobit
regression, Tobin 1958; Amemiya, *Advanced Econometrics* 1985, §10.2): a censored row
contributes ``log P(q > log cap) = log Phi((a_k + b_k (t - t0) - log cap) / s_k)``. So a
tail that runs into the cap still says how fast it grows. ``rho`` gets an ordinary
least-squares line, clipped to ``[0, 0.99]`` when extrapolated. A forecast row is the
levels' lines at the step, sorted (the monotone rearrangement of Chernozhukov,
Fernandez-Val & Galichon 2010, *Econometrica* 78(3)), mapped back to lengths and clipped to
``[1, cap]``: what lands at the cap is the forecast share at the cap. The forecast is drawn
by :class:`sim.models.copula_lengths.CopulaLengths`, one row and one ``rho`` per step.

From verl's per-step aggregates (``response_length/mean``, ``/max``, ``/min``,
``/clip_ratio``) the rows are the two levels ``mu_t`` and ``mu_t + sigma_t`` of the
per-step censored lognormal of :func:`calibration.fits.lengths_fit.fit_step` (its
censoring at the cap is in that fit); the aggregates say nothing of ``rho``.

:meth:`DriftFit.static` is the same model with every slope held at zero: the naive
"static fit" that a forecast has to beat.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rolloutlab.calibration.fits.lengths_fit import censored_moments
from rolloutlab.calibration.fits.transfer import normal_score_icc
from rolloutlab.sim.models.copula_lengths import CopulaLengths
from scipy import optimize, special

MIN_SCALE = 1e-3
"""Smallest residual scale of a level's line (log tokens): a lattice quantile that never
moves has zero spread, which the likelihood would otherwise chase to minus infinity."""


@dataclass(frozen=True)
class StepSummary:
    """Per-step summaries of the fit steps (module docstring)."""

    steps: np.ndarray
    """``(T,)`` ascending training steps."""
    log_q: np.ndarray
    """``(T, M)`` log lengths (log tokens) at each level, each row ascending."""
    censored: np.ndarray
    """``(T, M)`` bool: the level's value sits at the cap (right-censored there)."""
    rho: np.ndarray | None
    """``(T,)`` normal-score ICC per step; None when the source has no groups."""
    cap: int
    """``max_response_length`` (tokens)."""


def summarise_groups(
    steps: list[int],
    per_step: list[list[np.ndarray]],
    cap: int,
    levels: int | None = None,
    censor: bool = True,
) -> StepSummary:
    """:class:`StepSummary` of per-sample steps: ``per_step[t]`` is step ``steps[t]``'s list
    of ``(G_i,)`` length arrays (tokens >= 1); ``levels`` None: the fewest lengths of a
    step (module docstring). A level whose value reaches ``cap`` is
    censored (``censor`` False: none is, for a log whose cap is unknown and ``cap`` only
    bounds the forecast). Raises ValueError on no steps, a step without lengths or a length above
    ``cap``."""
    if not per_step or len(steps) != len(per_step):
        raise ValueError(f"summarise_groups: {len(steps)} steps for {len(per_step)} step groups")
    if levels is None:
        levels = min(sum(len(g) for g in groups) for groups in per_step)
    u = (np.arange(max(levels, 1)) + 0.5) / max(levels, 1)
    rows, rho = [], []
    for s, groups in zip(steps, per_step, strict=True):
        x = np.concatenate(groups).astype(np.float64) if groups else np.empty(0)
        if x.size == 0 or x.min() < 1 or x.max() > cap:
            raise ValueError(f"summarise_groups: step {s}: lengths must lie in [1, {cap}]")
        rows.append(np.quantile(x, u, method="inverted_cdf"))
        rho.append(normal_score_icc([groups]))
    q = np.asarray(rows)
    return StepSummary(
        steps=np.asarray(steps, dtype=np.int64),
        log_q=np.log(q),
        censored=(q >= cap) & censor,
        rho=np.asarray(rho),
        cap=int(cap),
    )


def summarise_aggregates(steps: list[int], mu: list[float], sigma: list[float], cap: int):
    """:class:`StepSummary` of per-step censored-lognormal fits (``mu``, ``sigma`` of
    :func:`calibration.fits.lengths_fit.fit_step`): the two levels ``mu`` and
    ``mu + sigma``, none censored (the fit already treated the cap), no ``rho``."""
    mu_a, sig_a = np.asarray(mu, dtype=np.float64), np.asarray(sigma, dtype=np.float64)
    return StepSummary(
        steps=np.asarray(steps, dtype=np.int64),
        log_q=np.stack([mu_a, mu_a + sig_a], axis=1),
        censored=np.zeros((len(mu_a), 2), dtype=bool),
        rho=None,
        cap=int(cap),
    )


def tobit_line(t: np.ndarray, y: np.ndarray, cens: np.ndarray, c: float, slope: bool = True):
    """``(a, b, s)`` of ``y = a + b t + s e`` by maximum likelihood with ``y`` right-censored
    at ``c`` where ``cens`` (module docstring); ``slope`` False holds ``b = 0``. With every
    value censored the line sits at ``c`` (``a = c``, ``b = 0``): nothing below the cap was
    seen. ``t``, ``y``, ``cens``: ``(T,)``."""
    if cens.all():
        return float(c), 0.0, MIN_SCALE
    X = np.stack([np.ones_like(t), t], axis=1) if slope else np.ones((len(t), 1))
    coef, *_ = np.linalg.lstsq(X[~cens], y[~cens], rcond=None)
    resid = y[~cens] - X[~cens] @ coef
    s0 = max(float(np.sqrt(np.mean(resid**2))), MIN_SCALE)
    if not cens.any():
        return float(coef[0]), float(coef[1]) if slope else 0.0, s0

    def nll(p):
        beta, s = p[:-1], np.exp(p[-1])
        m = X @ beta
        z = (y - m) / s
        ll_obs = -0.5 * z[~cens] ** 2 - np.log(s)
        ll_cen = special.log_ndtr((m[cens] - c) / s)
        return -(ll_obs.sum() + ll_cen.sum())

    p0 = np.append(coef, np.log(s0))
    bounds = [(None, None)] * len(coef) + [(np.log(MIN_SCALE), None)]
    res = optimize.minimize(nll, p0, method="L-BFGS-B", bounds=bounds)
    a = float(res.x[0])
    b = float(res.x[1]) if slope else 0.0
    return a, b, float(np.exp(res.x[-1]))


@dataclass(frozen=True)
class DriftFit:
    """Per-level lines of log length and a line of ``rho`` (module docstring)."""

    intercept: np.ndarray
    """``(M,)`` ``a_k``: log length at step ``step0``."""
    slope: np.ndarray
    """``(M,)`` ``b_k``: log tokens per step."""
    scale: np.ndarray
    """``(M,)`` ``s_k``: residual scale of each level around its line (log tokens)."""
    rho_intercept: float | None
    """``rho`` at ``step0`` (None: not identified, aggregates)."""
    rho_slope: float
    """``rho`` per step."""
    step0: int
    """The step the lines are centred on (the first fit step)."""
    cap: int
    """``max_response_length`` (tokens)."""
    fit_steps: tuple[int, ...]
    """The steps fitted."""

    def log_quantiles(self, step) -> np.ndarray:
        """``(..., M)`` forecast log lengths at ``step`` (scalar or array), rearranged
        ascending and clipped to ``[0, log cap]``."""
        t = np.asarray(step, dtype=np.float64)[..., None] - self.step0
        q = np.sort(self.intercept + self.slope * t, axis=-1)
        return np.clip(q, 0.0, np.log(self.cap))

    def rho(self, step, default: float = 0.0) -> np.ndarray:
        """Forecast ``rho`` at ``step``, clipped to ``[0, 0.99]``; ``default`` when the
        fit has none."""
        t = np.asarray(step, dtype=np.float64) - self.step0
        if self.rho_intercept is None:
            return np.full(t.shape, default)
        return np.clip(self.rho_intercept + self.rho_slope * t, 0.0, 0.99)

    def lengths_model(self, steps: list[int], rho_default: float = 0.0) -> CopulaLengths:
        """The forecast at ``steps`` (ascending) as a
        :class:`sim.models.copula_lengths.CopulaLengths`: row ``i`` and ``rho[i]`` serve
        ``steps[i]``; lengths ``round(exp(q))`` in ``[1, cap]``."""
        q = np.clip(np.rint(np.exp(self.log_quantiles(np.asarray(steps)))), 1, self.cap)
        return CopulaLengths(
            quantiles=np.sort(q.astype(np.int64), axis=1),
            steps=tuple(int(s) for s in steps),
            rho=tuple(float(r) for r in self.rho(np.asarray(steps), rho_default)),
            max_response_length=self.cap,
        )

    def lognormal(self, step) -> tuple[np.ndarray, np.ndarray]:
        """``(mu, sigma)`` at ``step`` of a fit of :func:`summarise_aggregates` rows
        (level 0 is ``mu``, level 1 ``mu + sigma``; ``sigma`` floored at 0.01)."""
        t = np.asarray(step, dtype=np.float64) - self.step0
        mu = self.intercept[0] + self.slope[0] * t
        top = self.intercept[1] + self.slope[1] * t
        return mu, np.maximum(top - mu, 0.01)

    def aggregates(self, step, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Forecast verl ``response_length/mean`` and ``/max`` (tokens) at ``step`` of a
        :func:`summarise_aggregates` fit, for ``n`` responses per step: the censored
        lognormal mean (:func:`calibration.fits.lengths_fit.censored_moments`) and the
        median of the largest of ``n`` draws, ``exp(mu + sigma Phi^-1(2^(-1/n)))``
        (the order statistic's median), capped."""
        mu, sigma = self.lognormal(step)
        mean = np.vectorize(lambda m, s: censored_moments(m, s, self.cap)[0])(mu, sigma)
        z = special.ndtri(2.0 ** (-1.0 / n))
        return mean, np.minimum(np.ceil(np.exp(mu + sigma * z)), self.cap)

    def static(self, summary: StepSummary) -> DriftFit:
        """The same model with every slope zero, fitted on every step of ``summary``
        (the naive static fit)."""
        return fit_drift(summary, window=None, slope=False)


def fit_drift(summary: StepSummary, window: int | None = None, slope: bool = True) -> DriftFit:
    """Fit :class:`DriftFit` on the last ``window`` steps of ``summary`` (None: all).
    Raises ValueError with fewer than 2 steps in the window."""
    T = len(summary.steps)
    first = 0 if window is None else max(T - window, 0)
    if T - first < 2:
        raise ValueError(f"fit_drift: need at least 2 steps, got {T - first}")
    steps = summary.steps[first:]
    t = (steps - steps[0]).astype(np.float64)
    c = float(np.log(summary.cap))
    lines = [
        tobit_line(t, summary.log_q[first:, k], summary.censored[first:, k], c, slope)
        for k in range(summary.log_q.shape[1])
    ]
    a, b, s = (np.array(v) for v in zip(*lines, strict=True))
    rho_a, rho_b = None, 0.0
    if summary.rho is not None:
        r = summary.rho[first:]
        if slope:
            rho_b, rho_a = (float(v) for v in np.polyfit(t, r, 1))
        else:
            rho_a = float(r.mean())
    return DriftFit(
        intercept=a,
        slope=b,
        scale=s,
        rho_intercept=rho_a,
        rho_slope=rho_b,
        step0=int(steps[0]),
        cap=summary.cap,
        fit_steps=tuple(int(x) for x in steps),
    )
