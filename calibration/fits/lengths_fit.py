"""Fit a right-censored lognormal to per-step response-length summaries.

verl logs, per training step, four statistics of the ``n = B*G`` response lengths of
the step: ``mean``, ``max``, ``min`` and ``clip_ratio`` (fraction of responses that hit
``max_response_length = c``). The model (the one :class:`sim.models.lengths.LognormalLengths`
draws from) is ``X ~ LogNormal(mu, sigma)``, ``L = min(ceil(X), c)``.

Each logged statistic is turned into a residual that is ~N(0, 1) under the model, and
``(mu, log sigma)`` minimises their sum of squares (``scipy.optimize.least_squares``).
With ``Phi`` the standard normal cdf and ``a = (ln c - mu) / sigma``:

* mean — censored (Tobit) moments of a lognormal (Johnson, Kotz & Balakrishnan,
  *Continuous Univariate Distributions* v1, ch. 14, partial expectations):
  ``E[min(X,c)] = exp(mu + sigma^2/2) Phi(a - sigma) + c (1 - Phi(a))``,
  ``E[min(X,c)^2] = exp(2 mu + 2 sigma^2) Phi(a - 2 sigma) + c^2 (1 - Phi(a))``;
  ``ceil`` adds ~0.5 token to uncensored lengths, so ``E[L] ~ E[min(X,c)] + 0.5 Phi(a)``.
  By the CLT ``z_mean = (mean - E[L]) / sqrt(Var[L] / n)``.
* max, min — probability integral transform of an order statistic of n i.i.d. draws:
  ``F(max)^n ~ U(0,1)`` and ``1 - (1 - F(min))^n ~ U(0,1)``, so
  ``z_max = Phi^-1(F(max - 1/2)^n)``, ``z_min = Phi^-1(1 - (1 - F(min - 1/2))^n)``
  (the 1/2 is the continuity correction of ``ceil``). ``max`` is skipped when it equals
  the cap (then it says no more than the clip count does).
* clip_ratio — the clip count ``k = n * clip_ratio ~ Binomial(n, p)``,
  ``p = P(X > c - 1) = 1 - Phi((ln(c-1) - mu)/sigma)``; mid-p transform
  ``z_clip = Phi^-1(BinomCDF(k-1) + 1/2 BinomPMF(k))``.

The run-level model: a straight line of the per-step ``mu`` and ``sigma`` on the step
(``scipy.stats.linregress``): ``mu_t = mu_0 + g_mu t``, ``sigma_t = sigma_0 (1 + g_s t)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats


@dataclass(frozen=True)
class StepLengthStats:
    """The logged length statistics of one step (tokens)."""

    step: int
    """Training step (verl's global step)."""
    mean: float
    """Mean response length over the step's n responses."""
    max: float
    """Longest response."""
    min: float
    """Shortest response."""
    clip_ratio: float
    """Fraction of responses of length >= the cap."""
    n: int
    """Number of responses (B * G)."""
    cap: int
    """``max_response_length`` (tokens)."""


@dataclass(frozen=True)
class StepFit:
    """Fitted ``(mu, sigma)`` of one step and its standardised residuals."""

    step: int
    mu: float
    """Mean of log length (log tokens)."""
    sigma: float
    """Standard deviation of log length (pooled over prompts and samples)."""
    z: dict
    """Residual name (``mean``, ``max``, ``min``, ``clip``) -> standardised residual."""
    model_mean: float
    """Fitted E[L] (tokens)."""
    logged_mean: float
    """The logged mean (tokens), to compare."""


def censored_moments(mu: float, sigma: float, cap: float) -> tuple[float, float]:
    """``(E[L], Var[L])`` of ``L = min(ceil(X), cap)``, ``X ~ LogNormal(mu, sigma)``,
    in tokens and tokens^2 (formulas in the module docstring)."""
    a = (np.log(cap) - mu) / sigma
    below = stats.norm.cdf(a)
    m1 = np.exp(mu + sigma**2 / 2) * stats.norm.cdf(a - sigma) + cap * stats.norm.sf(a)
    m2 = np.exp(2 * mu + 2 * sigma**2) * stats.norm.cdf(a - 2 * sigma) + cap**2 * stats.norm.sf(a)
    return float(m1 + 0.5 * below), float(max(m2 - m1**2, 1e-12))


def clip_probability(mu: float, sigma: float, cap: float) -> float:
    """``P(ceil(X) >= cap) = P(X > cap - 1)`` for ``X ~ LogNormal(mu, sigma)``."""
    return float(stats.norm.sf((np.log(max(cap - 1.0, 1e-9)) - mu) / sigma))


def residuals(mu: float, sigma: float, s: StepLengthStats) -> dict[str, float]:
    """Standardised residuals of one step's statistics under ``(mu, sigma)``; see the
    module docstring. Keys: ``mean``, ``min``, ``clip`` and ``max`` (if below the cap)."""
    n, cap = s.n, s.cap
    e, v = censored_moments(mu, sigma, cap)
    z = {"mean": (s.mean - e) / np.sqrt(v / n)}
    x_min = (np.log(max(s.min - 0.5, 0.5)) - mu) / sigma
    z["min"] = float(stats.norm.ppf(-np.expm1(n * stats.norm.logsf(x_min))))
    if s.max < cap:
        x_max = (np.log(max(s.max - 0.5, 0.5)) - mu) / sigma
        z["max"] = float(stats.norm.isf(-np.expm1(n * stats.norm.logcdf(x_max))))
    p = clip_probability(mu, sigma, cap)
    k = int(round(s.clip_ratio * n))
    u = stats.binom.cdf(k - 1, n, p) + 0.5 * stats.binom.pmf(k, n, p)
    z["clip"] = float(stats.norm.ppf(np.clip(u, 1e-15, 1 - 1e-15)))
    return {k_: float(np.clip(v_, -40.0, 40.0)) for k_, v_ in z.items()}


def fit_step(s: StepLengthStats) -> StepFit:
    """Fit ``(mu, sigma)`` to one step's logged statistics (least squares of the
    standardised residuals over ``(mu, log sigma)``).

    Raises: ValueError if the statistics are inconsistent (``min > mean``, ``mean >
    max``, ``max > cap``, non-positive lengths or ``n < 2``), naming the step.
    """
    if not (0 < s.min <= s.mean <= s.max <= s.cap) or s.n < 2 or not (0 <= s.clip_ratio <= 1):
        raise ValueError(f"step {s.step}: inconsistent length statistics {s}")
    spread = np.log(max(s.max, s.min + 1)) - np.log(s.min)
    sigma0 = max(0.05, spread / (2 * stats.norm.isf(1.0 / s.n)))
    x0 = np.array([np.log(s.mean) - sigma0**2 / 2, np.log(sigma0)])

    def fun(x):
        return np.array(list(residuals(x[0], np.exp(x[1]), s).values()))

    res = optimize.least_squares(
        fun, x0, bounds=([0.0, np.log(0.01)], [np.log(s.cap) + 5, np.log(5.0)])
    )
    mu, sigma = float(res.x[0]), float(np.exp(res.x[1]))
    return StepFit(
        step=s.step,
        mu=mu,
        sigma=sigma,
        z=residuals(mu, sigma, s),
        model_mean=censored_moments(mu, sigma, s.cap)[0],
        logged_mean=s.mean,
    )


@dataclass(frozen=True)
class RunLengthFit:
    """Run-level length model: linear trends of the per-step fits over the steps."""

    mu0: float
    """``mu`` at step ``step0`` (intercept of the line), log tokens."""
    mu_growth_per_step: float
    """Slope of ``mu`` per step (log tokens / step)."""
    mu_growth_se: float
    """Standard error of that slope."""
    sigma0: float
    """``sigma`` at step ``step0``."""
    sigma_growth_per_step: float
    """Relative slope of ``sigma`` per step (``sigma_t = sigma0 (1 + g t)``)."""
    step0: int
    """First step used; the scenario's step 0 is this step."""
    rms_z: float
    """Root mean square of every standardised residual of every step (1 = as noisy as
    the model says; much more = the lognormal does not describe the logs)."""
    mean_abs_rel_err_mean: float
    """Mean |fitted E[L] / logged mean - 1| over the steps."""


def fit_run(fits: list[StepFit]) -> RunLengthFit:
    """Trend lines over per-step fits (``scipy.stats.linregress``). Needs >= 2 fits."""
    if len(fits) < 2:
        raise ValueError(f"fit_run: need at least 2 fitted steps, got {len(fits)}")
    steps = np.array([f.step for f in fits], dtype=float)
    t = steps - steps[0]
    lr_mu = stats.linregress(t, [f.mu for f in fits])
    lr_s = stats.linregress(t, [f.sigma for f in fits])
    zs = np.array([v for f in fits for v in f.z.values()])
    return RunLengthFit(
        mu0=float(lr_mu.intercept),
        mu_growth_per_step=float(lr_mu.slope),
        mu_growth_se=float(lr_mu.stderr),
        sigma0=float(lr_s.intercept),
        sigma_growth_per_step=float(lr_s.slope / lr_s.intercept),
        step0=int(steps[0]),
        rms_z=float(np.sqrt(np.mean(zs**2))),
        mean_abs_rel_err_mean=float(np.mean([abs(f.model_mean / f.logged_mean - 1) for f in fits])),
    )


def split_sigma(sigma: float, icc: float) -> tuple[float, float]:
    """``(sigma_prompt, sigma_within)`` with ``sigma_prompt^2 = icc sigma^2`` and
    ``sigma_within^2 = (1 - icc) sigma^2`` (the total log spread is kept)."""
    if not (0.0 <= icc <= 1.0) or sigma < 0:
        raise ValueError(f"split_sigma: need 0 <= icc <= 1 and sigma >= 0, got {icc}, {sigma}")
    return float(sigma * np.sqrt(icc)), float(sigma * np.sqrt(1.0 - icc))
