"""Pass-rate calibration: beta-binomial MLE of per-prompt pass rates, and the
length-correctness coupling, from a grouped per-sample file (docs/learning.md).

Input: :class:`GroupedSamples`, per-prompt correctness and response lengths, read from a
grouped per-sample file by :func:`calibration.readers.grouped.read_grouped` and converted by
:mod:`calibration.scenarios.groups` (``read_pass_rate_samples``, ``grouped_samples``).
Output: the ``pass_rate`` block of a scenario (``{"spec": "beta:A,B",
"coupling": c, "provenance", "fit"}``).

- Pass rates: ``k_i ~ BetaBinomial(n_i, a, b)``; (a, b) maximise the log likelihood
  (scipy.stats.betabinom, scipy.optimize on log a, log b); standard errors from the
  observed information (scipy.differentiate.hessian of the negative log likelihood).
- Coupling ``c``: ``logit P(correct_ij) = alpha_i + c * z_ij``, z = standardised log length
  within the group (the model of ``sim.models.passrate.draw_correct``). The per-prompt effects
  alpha_i are eliminated by conditioning on each group's number correct k_i (conditional
  logistic regression, Chamberlain 1980): ``P(set S | k_i) = exp(c sum_S z) / e_k(exp(c z))``
  with e_k the elementary symmetric polynomial; homogeneous groups carry no information.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats
from scipy.differentiate import hessian


@dataclass(frozen=True)
class GroupedSamples:
    """Per-prompt correctness and response lengths of a grouped sample file."""

    correct: list[np.ndarray]
    """One (n_i,) bool array per prompt."""
    lengths: list[np.ndarray] | None
    """One (n_i,) float array per prompt (characters or tokens), or None."""
    length_unit: str
    """What ``lengths`` counts (``GroupedTrace.length_unit``), "none" without lengths."""


def betabinom_nll(log_ab: np.ndarray, k: np.ndarray, n: np.ndarray) -> float:
    """Negative log likelihood of counts k (m,) out of n (m,) at (log a, log b)."""
    a, b = np.exp(log_ab[0]), np.exp(log_ab[1])
    return float(-stats.betabinom.logpmf(k, n, a, b).sum())


def observed_covariance(f, x: np.ndarray) -> np.ndarray:
    """Inverse of the observed information: the Hessian of the negative log likelihood
    ``f`` (a scalar function of a (d,) vector) at its minimum ``x``, by
    scipy.differentiate.hessian. Returns (d, d). Raises numpy.linalg.LinAlgError when
    the Hessian is singular."""

    def fv(X: np.ndarray) -> np.ndarray:  # scipy evaluates on (d, ...) arrays of points
        flat = X.reshape(X.shape[0], -1)
        return np.array([f(flat[:, j]) for j in range(flat.shape[1])]).reshape(X.shape[1:])

    h = hessian(fv, np.asarray(x, float), order=4, maxiter=3, initial_step=0.05)
    return np.linalg.inv(h.ddf)


def fit_beta_binomial(k, n) -> dict:
    """Beta-binomial MLE of pass-rate parameters (a, b) from counts.

    k, n: (m,) ints, 0 <= k <= n, n >= 1. Returns ``{"alpha", "beta", "loglik",
    "se": {"alpha", "beta"}, "mean", "mean_se", "converged"}``; SEs from the observed
    information in (log a, log b), mapped by the delta method. Raises ValueError on
    bad counts or when all counts are 0 or all are n (a boundary MLE: no finite fit).
    """
    k, n = np.asarray(k, float), np.asarray(n, float)
    if k.shape != n.shape or k.ndim != 1 or k.size == 0:
        raise ValueError("counts: expected two (m,) arrays of the same length")
    if np.any(n < 1) or np.any(k < 0) or np.any(k > n) or np.any(k % 1) or np.any(n % 1):
        raise ValueError("counts: expected integers with 0 <= k <= n, n >= 1")
    if np.all(k == 0) or np.all(k == n):
        raise ValueError("counts: every sample is wrong (or every one right); no beta fit")
    m = k.sum() / n.sum()
    x0 = np.log([m * 2, (1 - m) * 2])
    res = optimize.minimize(
        lambda x: betabinom_nll(x, k, n), x0, method="Nelder-Mead",
        options={"xatol": 1e-8, "fatol": 1e-10, "maxiter": 4000},
    )  # fmt: skip
    x = res.x
    cov_log = observed_covariance(lambda y: betabinom_nll(y, k, n), x)  # (2, 2), log space
    a, b = np.exp(x)
    J = np.diag([a, b])  # d(a, b) / d(log a, log b)
    cov = J @ cov_log @ J
    g = np.array([b, -a]) / (a + b) ** 2  # d mean / d(a, b), mean = a / (a + b)
    return {
        "alpha": float(a),
        "beta": float(b),
        "loglik": float(-res.fun),
        "se": {"alpha": float(np.sqrt(cov[0, 0])), "beta": float(np.sqrt(cov[1, 1]))},
        "cov": cov.tolist(),
        "mean": float(a / (a + b)),
        "mean_se": float(np.sqrt(g @ cov @ g)),
        "converged": bool(res.success),
    }


def standardised_log_length(lengths: np.ndarray) -> np.ndarray:
    """z of one group: (log L - mean log L) / std log L (ddof 0); zeros when std is 0."""
    x = np.log(np.asarray(lengths, float))
    sd = x.std()
    return np.zeros_like(x) if sd == 0 else (x - x.mean()) / sd


def log_elementary_symmetric(u: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``log e_k(exp(u_i))`` for every row ``u_i`` of ``u`` (n, G) at its own ``k_i``
    (n,) ints in ``[0, G]``: the elementary symmetric polynomial by the recursion
    ``E_m <- E_m + w_j E_{m-1}`` over ``j`` (the coefficients of ``prod_j (x + w_j)``),
    vectorised over rows, with ``w = exp(u - max u)`` scaled back by ``k max u``."""
    n, G = u.shape
    shift = u.max(axis=1, keepdims=True)
    w = np.exp(u - shift)
    E = np.zeros((n, G + 1))
    E[:, 0] = 1.0
    for j in range(G):
        E[:, 1 : j + 2] = E[:, 1 : j + 2] + w[:, j : j + 1] * E[:, : j + 1]
    return np.log(E[np.arange(n), k]) + k * shift[:, 0]


def conditional_nll(c: float, groups: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """Negative conditional log likelihood of coupling ``c`` (module docstring): sum over
    groups ``(z (G,) float, y (G,) bool)`` of ``-log[exp(c sum_{y} z) / e_k(exp(c z))]``,
    k = number correct (:func:`log_elementary_symmetric`, groups of one size at a time)."""
    total = 0.0
    for size in sorted({len(z) for z, _ in groups}):
        same = [(z, y) for z, y in groups if len(z) == size]
        u = c * np.stack([z for z, _ in same])
        y = np.stack([y for _, y in same])
        total -= float((u * y).sum() - log_elementary_symmetric(u, y.sum(axis=1)).sum())
    return total


def fit_coupling(correct: list[np.ndarray], lengths: list[np.ndarray]) -> dict:
    """Conditional-logit MLE of the length coupling c (module docstring).

    correct / lengths: one (n_i,) array each per prompt. Returns ``{"coupling", "se",
    "loglik", "informative_groups", "samples_used"}`` (coupling and se None when no
    group is informative). Observed information by scipy.differentiate.hessian.
    """
    groups = [
        (standardised_log_length(L), np.asarray(y, bool))
        for y, L in zip(correct, lengths, strict=True)
        if 0 < int(np.sum(y)) < len(y)
    ]
    out = {"informative_groups": len(groups), "samples_used": sum(len(z) for z, _ in groups)}
    if not groups:
        return {**out, "coupling": None, "se": None, "loglik": None}
    res = optimize.minimize_scalar(
        lambda c: conditional_nll(c, groups), bounds=(-20, 20), method="bounded"
    )
    var = float(
        observed_covariance(lambda v: conditional_nll(float(v[0]), groups), np.array([res.x]))[0, 0]
    )
    return {
        **out,
        "coupling": float(res.x),
        "se": float(np.sqrt(var)) if var > 0 else None,
        "loglik": float(-res.fun),
    }


def pass_rate_block(data: GroupedSamples, provenance: dict) -> dict:
    """The scenario's ``pass_rate`` block: spec, coupling (0.0 when not fitted),
    provenance (as given plus n_prompts, n_samples) and fit statistics."""
    k = np.array([c.sum() for c in data.correct])
    n = np.array([c.size for c in data.correct])
    beta = fit_beta_binomial(k, n)
    coup = (
        fit_coupling(data.correct, data.lengths)
        if data.lengths is not None
        else {"coupling": None, "se": None, "informative_groups": None}
    )
    n_max = int(n.max())
    observed = np.bincount(k[n == n_max], minlength=n_max + 1)
    expected = stats.betabinom.pmf(np.arange(n_max + 1), n_max, beta["alpha"], beta["beta"])
    return {
        "spec": f"beta:{beta['alpha']:.4g},{beta['beta']:.4g}",
        "coupling": round(coup["coupling"], 4) if coup["coupling"] is not None else 0.0,
        "provenance": {**provenance, "n_prompts": int(k.size), "n_samples": int(n.sum())},
        "fit": {
            "method": "beta-binomial MLE; coupling by conditional logistic MLE",
            "alpha": beta["alpha"],
            "beta": beta["beta"],
            "loglik": beta["loglik"],
            "se": {**beta["se"], "coupling": coup["se"]},
            "mean_pass_rate": beta["mean"],
            "mean_pass_rate_se": beta["mean_se"],
            "observed_pass_rate": float(k.sum() / n.sum()),
            "coupling_loglik": coup.get("loglik"),
            "coupling_informative_groups": coup["informative_groups"],
            "length_unit": data.length_unit,
            f"count_hist_observed_n{n_max}": observed.tolist(),
            f"count_hist_expected_n{n_max}": (expected * (n == n_max).sum()).round(2).tolist(),
        }
        | (
            {"coupling_note": "not fitted: the data have no response lengths (coupling 0)"}
            if data.lengths is None
            else {}
        ),
    }
