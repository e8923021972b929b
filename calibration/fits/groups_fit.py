"""Fit the hierarchical lognormal length model to grouped response lengths.

Model (the one :class:`sim.models.lengths.LognormalLengths` draws from): for prompt group ``i``
at step ``t_i`` and sample ``j``,
``log X_ij = mu0 + g (t_i - t_0) + sigma_prompt z_i + sigma_within e_ij``, ``z, e ~ N(0, 1)``
independent, and the logged length is ``L_ij = min(ceil(X_ij), c_ij)``. So an uncensored
``L`` says ``X in (L - 1, L]`` (interval likelihood ``Phi(b) - Phi(a)`` on the log scale,
exact for the simulator's rounding) and a censored one (``L = c``, finish reason
``length``) says ``X > c - 1`` (survival ``1 - Phi(a)``) — the Tobit/censored-regression
likelihood (Tobin 1958) with a random intercept per group.

The random intercept is integrated out by adaptive Gauss-Hermite quadrature (Liu &
Pierce 1994; probabilists' nodes ``x_k``, weights ``w_k``,
:func:`numpy.polynomial.hermite_e.hermegauss`), nodes moved to ``z_k = c_i + s_i x_k``
with ``(c_i, s_i)`` the Gaussian posterior of the intercept given the group's mean log
length: ``lik_i = sum_k w_k / sqrt(2 pi) * s_i exp((x_k^2 - z_k^2) / 2) *
prod_j p_ij(mu_i + sigma_prompt z_k)`` (a random-effects Tobit, Butler & Moffitt 1982;
without the shift a group much tighter than ``sigma_prompt`` falls between fixed nodes). ``(mu0, g, log sigma_prompt, log sigma_within)`` maximise
the summed log likelihood (``scipy.optimize.minimize``); standard errors come from the
observed information, the inverse Hessian of the negative log likelihood
(central second differences, step ``1e-3`` on the parameters; ``scipy.differentiate.hessian``
is adaptive and took minutes here), carried to ``sigma`` and the ICC
``sigma_prompt^2 / (sigma_prompt^2 + sigma_within^2)`` by the delta method. Groups of
one step share no intercept with other steps (a prompt that recurs is a new group).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from numpy.polynomial.hermite_e import hermegauss
from rolloutlab.sim.models.dynamics import fit_icc
from rolloutlab.sim.models.lengths import LognormalLengths
from rolloutlab.sim.models.within_law import LAWS, check_law, log_interval
from scipy import optimize, special

N_NODES = 32
"""Gauss-Hermite nodes (exact for polynomials of degree < 64 in ``z``)."""

DF_LOG_BOUNDS = (np.log(0.5), np.log(100.0))
"""Bounds of ``log df`` of the ``t`` law (df in [0.5, 100]; above 100 it is the normal)."""


@dataclass(frozen=True)
class GroupFit:
    """Maximum-likelihood hierarchical lognormal fit with standard errors."""

    mu0: float
    """Mean log length at step ``step0`` (log of the length unit)."""
    mu_growth_per_step: float
    """Slope of the mean log length per step (0 and not fitted with one step)."""
    sigma_prompt: float
    """Spread of the per-group mean log length (prompt difficulty)."""
    sigma_within: float
    """Spread of log length within a group."""
    icc: float
    """``sigma_prompt^2 / (sigma_prompt^2 + sigma_within^2)``."""
    se: dict
    """Standard errors of the five fields above (None where not fitted)."""
    step0: int
    """First step of the data (the model's step 0)."""
    loglik: float
    n_groups: int
    n_samples: int
    n_censored: int
    converged: bool
    """The optimiser's success flag (``scipy.optimize.OptimizeResult.success``)."""
    icc_anova: float | None
    """One-way ANOVA ICC(1) of log lengths (:func:`sim.models.dynamics.fit_icc`, uncensored,
    equal G only; a cross-check), None for ragged groups."""
    within_law: str = "normal"
    """Law of the within-group noise (:data:`sim.models.within_law.LAWS`)."""
    within_df: float = 0.0
    """Degrees of freedom of the ``t`` law (fitted; 0 for the other laws)."""
    aic: float = float("nan")
    """Akaike information criterion ``2 k - 2 loglik`` (``k`` fitted parameters)."""

    def model(self, max_response_length: int) -> LognormalLengths:
        """The fitted :class:`sim.models.lengths.LognormalLengths` (its step 0 is ``step0``)."""
        return LognormalLengths(
            mu=self.mu0,
            sigma_prompt=self.sigma_prompt,
            sigma_within=self.sigma_within,
            max_response_length=max_response_length,
            mu_growth_per_step=self.mu_growth_per_step,
            within_law=self.within_law,
            within_df=self.within_df,
        )

    def to_dict(self) -> dict:
        """JSON-ready fields."""
        return asdict(self)


class _Likelihood:
    """Negative log likelihood of the module's model for a set of groups (adaptive
    Gauss-Hermite over each group's intercept, module docstring)."""

    def __init__(self, groups, censored, steps, law: str = "normal"):
        self.law = law
        sizes = np.array([len(g) for g in groups])
        self.gid = np.repeat(np.arange(len(groups)), sizes)
        self.sizes = sizes.astype(np.float64)
        L = np.concatenate(groups).astype(np.float64)
        cens = np.concatenate(censored).astype(bool)
        self.lo = np.log(np.maximum(L - 1.0, 1e-300))  # log 0 -> -inf for L = 1
        self.lo[L <= 1] = -np.inf
        self.hi = np.where(cens, np.inf, np.log(L))
        self.t = np.asarray(steps, dtype=np.float64) - np.min(steps)  # per group
        self.ybar = np.bincount(self.gid, weights=np.log(np.maximum(L - 0.5, 0.5))) / sizes
        x, w = hermegauss(N_NODES)
        self.x, self.logw = x, np.log(w / np.sqrt(2 * np.pi))
        self.n_groups = len(groups)

    def __call__(self, theta: np.ndarray) -> float:
        mu0, g, log_sp, log_sw, log_df = theta
        sp, sw, df = np.exp(log_sp), np.exp(log_sw), np.exp(log_df)
        mu = mu0 + g * self.t  # (n_groups,)
        # adaptive nodes: z = c + s x, (c, s) the Gaussian posterior of the intercept given
        # the group's mean log length (censoring ignored: it only moves the nodes; a t
        # law's scale is widened to its standard deviation, or doubled without one)
        sd = sw if self.law != "t" else sw * (np.sqrt(df / (df - 2)) if df > 2.5 else 2.0)
        prec = 1.0 + self.sizes * sp**2 / sd**2
        s = 1.0 / np.sqrt(prec)
        c = self.sizes * sp * (self.ybar - mu) / sd**2 / prec
        z = c[:, None] + s[:, None] * self.x[None, :]  # (n_groups, K)
        logw = self.logw + np.log(s)[:, None] - 0.5 * z**2 + 0.5 * self.x**2
        m = (mu[:, None] + sp * z)[self.gid]  # (N, K)
        lp = log_interval((self.lo[:, None] - m) / sw, (self.hi[:, None] - m) / sw, self.law, df)
        per_group = np.stack(
            [
                np.bincount(self.gid, weights=lp[:, k], minlength=self.n_groups)
                for k in range(len(self.x))
            ],
            axis=1,
        )
        return float(-special.logsumexp(per_group + logw, axis=1).sum())


def central_hessian(f, x: np.ndarray, h: float = 1e-3) -> np.ndarray:
    """``(n, n)`` Hessian of scalar ``f`` at ``x`` (n,) by central differences:
    ``[f(x+h_i+h_j) - f(x+h_i-h_j) - f(x-h_i+h_j) + f(x-h_i-h_j)] / (4 h^2)``."""
    n = len(x)
    E = np.eye(n) * h
    H = np.empty((n, n))
    for i in range(n):
        for j in range(i, n):
            H[i, j] = H[j, i] = (
                f(x + E[i] + E[j]) - f(x + E[i] - E[j]) - f(x - E[i] + E[j]) + f(x - E[i] - E[j])
            ) / (4 * h * h)
    return H


def fit_groups(
    groups: list[np.ndarray],
    censored: list[np.ndarray] | None = None,
    steps: list[int] | np.ndarray | None = None,
    drift: bool | None = None,
    law: str = "normal",
) -> GroupFit:
    """Fit the module's model to ``groups`` (one ``(G_i,)`` int array of lengths >= 1 per
    group), ``censored`` (matching bool arrays; None = none censored) and each group's
    ``steps`` (None = all step 0). ``drift`` fits the growth ``g`` (default: when there is
    more than one step). ``law``: the within-group law (:mod:`sim.models.within_law`; the
    likelihood's ``Phi`` becomes that law's CDF).

    Returns: :class:`GroupFit`. Raises: ValueError on fewer than 2 groups, a group with no
    sample, a length < 1, or an unknown ``law``. Groups of one sample each leave ``sigma_within``
    unidentified (its standard error is then None or huge).
    """
    if len(groups) < 2 or any(len(g) == 0 for g in groups):
        raise ValueError("fit_groups: need >= 2 groups, none empty")
    if any((np.asarray(g) < 1).any() for g in groups):
        raise ValueError("fit_groups: lengths must be >= 1")
    check_law(law, 1.0)
    censored = censored or [np.zeros(len(g), dtype=bool) for g in groups]
    steps = np.zeros(len(groups)) if steps is None else np.asarray(steps, dtype=np.float64)
    drift = bool(np.ptp(steps) > 0) if drift is None else drift
    nll = _Likelihood(groups, censored, steps, law)
    logs = [np.log(np.asarray(g, dtype=np.float64)) for g in groups]
    means = np.array([x.mean() for x in logs])
    within = np.sqrt(np.mean([x.var() for x in logs if x.size > 1] or [0.1])) + 0.05
    t_law = law == "t"
    x0 = np.array(
        [means.mean(), 0.0, np.log(means.std() + 0.05), np.log(within), np.log(3.0) * t_law]
    )
    bounds = [
        (None, None),
        (None, None) if drift else (0.0, 0.0),
        (-9.0, 3.0),
        (-9.0, 3.0),
        DF_LOG_BOUNDS if t_law else (0.0, 0.0),
    ]
    res = optimize.minimize(nll, x0, method="L-BFGS-B", bounds=bounds)
    theta = res.x
    free = ([0, 1, 2, 3] if drift else [0, 2, 3]) + [4] * t_law

    def sub(v):
        th = theta.copy()
        th[free] = v
        return nll(th)

    H = central_hessian(sub, theta[free])
    cov = np.full((5, 5), np.nan)
    try:
        cov[np.ix_(free, free)] = np.linalg.inv(H)
    except np.linalg.LinAlgError:
        pass
    sp, sw = np.exp(theta[2]), np.exp(theta[3])
    icc = sp**2 / (sp**2 + sw**2)
    # delta method: d icc / d log sp = 2 icc (1 - icc), d icc / d log sw = -2 icc (1 - icc)
    grad = np.array([2 * icc * (1 - icc), -2 * icc * (1 - icc)])
    var_icc = grad @ cov[2:4, 2:4] @ grad

    def se(v):
        return float(np.sqrt(v)) if np.isfinite(v) and v >= 0 else None

    sizes = {len(g) for g in groups}
    equal = len(sizes) == 1 and min(sizes) >= 2
    return GroupFit(
        mu0=float(theta[0]),
        mu_growth_per_step=float(theta[1]),
        sigma_prompt=float(sp),
        sigma_within=float(sw),
        icc=float(icc),
        se={
            "mu0": se(cov[0, 0]),
            "mu_growth_per_step": se(cov[1, 1]) if drift else None,
            "sigma_prompt": se(sp**2 * cov[2, 2]),
            "sigma_within": se(sw**2 * cov[3, 3]),
            "icc": se(var_icc),
            "within_df": se(np.exp(2 * theta[4]) * cov[4, 4]) if t_law else None,
        },
        step0=int(np.min(steps)),
        loglik=float(-res.fun),
        n_groups=len(groups),
        n_samples=int(sum(len(g) for g in groups)),
        n_censored=int(sum(np.sum(c) for c in censored)),
        converged=bool(res.success),
        icc_anova=fit_icc(np.stack(groups)) if equal else None,
        within_law=law,
        within_df=float(np.exp(theta[4])) if t_law else 0.0,
        aic=float(2 * len(free) + 2 * res.fun),
    )


def fit_groups_law(
    groups: list[np.ndarray],
    censored: list[np.ndarray] | None,
    steps: list[int] | np.ndarray | None,
    law: str = "normal",
) -> tuple[GroupFit, dict[str, float]]:
    """:func:`fit_groups` with the within-group ``law``, or with ``law = "auto"`` the law
    of :data:`sim.models.within_law.LAWS` of least AIC (Akaike 1974; ``t`` pays one parameter
    more). Returns the fit and ``{law: AIC}`` of the laws tried. Raises ValueError as
    :func:`fit_groups`."""
    laws = LAWS if law == "auto" else (law,)
    fits = {w: fit_groups(groups, censored, steps, law=w) for w in laws}
    best = min(fits.values(), key=lambda f: f.aic)
    return best, {w: f.aic for w, f in fits.items()}
