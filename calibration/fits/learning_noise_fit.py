"""Fit the learning law with its gradient-noise term (:mod:`sim.models.learning_noise`) to
real runs at two or more (G, B) settings (docs/learning.md §3, "noise law").

Each run is replayed on its own groups: per step ``t`` the infinite-batch drive at
kappa = 1, ``g_t = (lr_t / lr_ref) (1 / n_t^loss) sum_i signal_i`` (the trained groups; the
loss is over the kept groups with dynamic sampling, as the real learner averages it), and
the informative samples ``n_t`` (responses of the groups with both rewards). With the
noise term at its expectation, ``theta_t = kappa sum_{s<t} g_s / (1 + b_noise / n_s)``
(or its saturating form); ``n_t`` counts a group of G as ``G / (1 + (G - 1) rho)`` samples
(the design effect). ``(a, b, kappa, b_noise[, theta_max][, rho])`` maximise the likelihood
of every group's count ``k ~ Binomial(G, sigmoid(logit p0 + theta_t))``,
``p0 ~ Beta(a, b)`` shared by all runs (one task, one warm start recipe). The noise's
random part is not in the likelihood (its path is unobserved); it is checked by the
seed spread it predicts (``rolloutlab compare learning``).

Why two settings: within one (G, B) the informative samples ``n_t`` barely vary, so
``kappa / (1 + b_noise / n)`` is one number and kappa and b_noise are not separately
identified; across settings n changes by the ratio of B G.
"""

from __future__ import annotations

import math

import numpy as np
from rolloutlab.calibration.fits.beta_grid import beta_logit_grid
from rolloutlab.calibration.fits.learning_fit import MODELS, mixed_count_pmf, shift
from rolloutlab.calibration.fits.passrate_fit import fit_beta_binomial
from rolloutlab.calibration.readers.run_curve import RunCurve
from rolloutlab.sim.models.learning import LearningParams
from rolloutlab.sim.models.learning_noise import (
    design_effect,
    effective_samples,
    efficiency,
    step_signal,
)
from scipy import optimize, special


def settings(curves: list[RunCurve]) -> list[tuple[int, int]]:
    """The distinct (G, B) of ``curves`` (each run's median G and median B), sorted."""
    out = set()
    for c in curves:
        out.add((int(np.median(c.G)), int(np.median([k.size for k in c.counts]))))
    return sorted(out)


def require_settings(curves: list[RunCurve]) -> list[tuple[int, int]]:
    """:func:`settings`, or ValueError (one line naming the setting) when fewer than two."""
    found = settings(curves)
    if len(found) < 2:
        G, B = found[0]
        raise ValueError(
            f"the noise law needs runs at two or more (G, B) settings to separate kappa from "
            f"b_noise; got one (G={G}, B={B}): add runs at another G or B, or fit the "
            "mean-field law (--mean-field)"
        )
    return found


def replay_groups(curve: RunCurve, lr_ref: float, advantage: str) -> tuple[np.ndarray, np.ndarray]:
    """``(g, m)`` (T,) each: the kappa = 1 infinite-batch drive of every step and its count
    of informative groups (module docstring)."""
    T = len(curve.G)
    g, m = np.zeros(T), np.zeros(T)
    for t, (G, lr, k) in enumerate(zip(curve.G, curve.lr, curve.counts, strict=True)):
        var = (k / G) * (1 - k / G)
        informative = var > 0
        denom = max(int(informative.sum()), 1) if curve.dynamic_sampling else k.size
        g[t] = (lr / lr_ref) * float(step_signal(var, advantage).sum()) / denom
        m[t] = int(informative.sum())
    return g, m


def replay_terms(
    curve: RunCurve, lr_ref: float, advantage: str, rho: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """``(g, n)`` (T,) each: the kappa = 1 infinite-batch drive of every step and its
    effective informative samples at design effect ``rho`` (:func:`replay_groups`;
    :func:`sim.models.learning_noise.effective_samples`)."""
    g, m = replay_groups(curve, lr_ref, advantage)
    return g, effective_samples(m, curve.G, rho)


def cumulative(g: np.ndarray, n: np.ndarray, b_noise: float) -> np.ndarray:
    """C_t (T,): the expected kappa = 1 shift before each step, ``sum_{s<t} g_s eff(n_s)``."""
    d = g * efficiency(n, b_noise)
    return np.concatenate([[0.0], np.cumsum(d)[:-1]])


def _data(curves: list[RunCurve], lr_ref: float, advantage: str) -> list[tuple]:
    """Per run: its (g, m, G per step) and, per group size, (row indices, G, count
    histogram)."""
    out = []
    for c in curves:
        g, m = replay_groups(c, lr_ref, advantage)
        per_G = []
        for G in np.unique(c.G):
            rows = np.flatnonzero(c.G == G)
            h = np.stack([np.bincount(c.counts[t], minlength=G + 1) for t in rows])
            per_G.append((rows, int(G), h))
        out.append((g, m, np.asarray(c.G, float), per_G))
    return out


def _nll(x: np.ndarray, data: list[tuple], capped: bool) -> float:
    """Negative log likelihood at (log a, log b, log kappa, log b_noise[, log theta_max]
    when ``capped``[, rho]): rho = 0 when x has no further entry."""
    a, b, kappa, b_noise = np.exp(x[:4])
    cap = math.exp(x[4]) if capped else math.inf
    rho = float(np.clip(x[4 + capped], 0.0, 1.0)) if len(x) > 4 + capped else 0.0
    lp0, w = beta_logit_grid(a, b)
    nll = 0.0
    for g, m, Gt, per_G in data:
        theta = shift(cumulative(g, effective_samples(m, Gt, rho), b_noise), kappa, cap)
        for rows, G, h in per_G:
            p = special.expit(lp0[None, :] + theta[rows][:, None])
            pk = mixed_count_pmf(G, p, w)
            nll -= float((h * np.log(np.maximum(pk, 1e-300))).sum())
    return nll


def rho_identified(found: list[tuple[int, int]]) -> bool:
    """Whether runs at the (G, B) settings ``found`` identify the design effect rho: three or
    more settings with two or more G. With two settings, ``kappa / (1 + b_noise / n)`` takes
    two values for three unknowns; with one G, rho only rescales b_noise."""
    return len(found) >= 3 and len({G for G, _ in found}) >= 2


def _canonical(c: RunCurve) -> tuple:
    """A sort key of a run's data alone (its settings, then its counts), so that the fit sees
    the same runs in the same order whatever order they were given in."""
    return (int(np.median(c.G)), len(c.G), tuple(int(k.sum()) for k in c.counts), c.lr.tolist())


def fit_noise_law(
    curves: list[RunCurve], model: str = "saturating", advantage: str = "std", init_steps: int = 3
) -> dict:
    """Fit ``(a, b, kappa, b_noise[, theta_max][, rho])`` on runs at >= 2 (G, B) settings
    (module docstring; rho, the design effect of :mod:`sim.models.learning_noise`, only
    where :func:`rho_identified`, else 0; fitted from the rho = 0 optimum and from 0.3,
    bounded to [0, 1]). Returns the ``learning`` block without provenance (LearningParams fields,
    ``b_noise`` in informative samples, plus ``fit``). Started from the better of two
    mean-field optima (b_noise ~ 0; from the beta-binomial fit of the first ``init_steps``
    steps at kappa 1 and 0.05), moved along its ridge ``kappa / (1 + b_noise / n)`` to
    b_noise 10, 30 and 300, the best kept; the runs are put in a canonical order first, so
    the result does not depend on the order they are given in (it did, in the last digits:
    L-BFGS-B's finite differences see a sum taken in another order). No standard errors
    (the observed information costs minutes here; the seed spread is the check).

    Raises ValueError (one line) when the runs hold fewer than two settings, naming it.
    """
    found = require_settings(curves)
    curves = sorted(curves, key=_canonical)  # the optimum must not depend on argument order
    if model not in MODELS:
        raise ValueError(f"learning model: expected one of {MODELS}, got {model!r}")
    first = [(k, g) for c in curves for k, g in zip(c.counts[:init_steps], c.G[:init_steps])]
    init = fit_beta_binomial(
        np.concatenate([k for k, _ in first]),
        np.concatenate([np.full(k.size, g) for k, g in first]),
    )
    lr_ref = float(np.median(np.concatenate([c.lr for c in curves])))
    data = _data(curves, lr_ref, advantage)
    cap = [math.log(3.0)] if model == "saturating" else []
    tiny = math.log(1e-9)  # b_noise ~ 0: the mean-field law

    capped = bool(cap)

    def mean_field(x):
        return _nll(np.r_[x[:3], tiny, x[3:]], data, capped)

    mf = min(  # two gains to start from: the surface has shallow local optima
        (
            optimize.minimize(
                mean_field, np.array([math.log(init["alpha"]), math.log(init["beta"]), k0, *cap]),
                method="L-BFGS-B",
            )
            for k0 in (0.0, math.log(0.05))
        ),
        key=lambda r: r.fun,
    )  # fmt: skip
    n_all = np.concatenate([m * Gt for _, m, Gt, _ in data])
    n_mean = float(n_all[n_all > 0].mean()) if np.any(n_all > 0) else 1.0
    starts = [  # the mean-field gain is kappa / (1 + b_noise / n): start on that ridge
        np.r_[mf.x[:2], mf.x[2] + math.log1p(bn / max(n_mean, 1.0)), math.log(bn), mf.x[3:]]
        for bn in (10.0, 30.0, 300.0)
    ]
    best = min(
        (optimize.minimize(_nll, s0, (data, capped), method="L-BFGS-B") for s0 in starts),
        key=lambda r: r.fun,
    )
    if best.fun > mf.fun:  # the noise law nests the mean-field one
        best = optimize.OptimizeResult(x=np.r_[mf.x[:3], tiny, mf.x[3:]], fun=mf.fun,
                                       success=mf.success)  # fmt: skip
    no_rho = best
    design = rho_identified(found)
    if design:  # from the rho = 0 optimum, and from rho 0.3 with b_noise / deff at the median G
        g_med = float(np.median([G for G, _ in found]))
        bounds = [(None, None)] * len(best.x) + [(0.0, 1.0)]
        starts = [np.r_[best.x, 0.0], np.r_[best.x, 0.0]]
        starts[1][3] -= math.log(float(design_effect(g_med, 0.3)))
        starts[1][-1] = 0.3
        best = min(
            (optimize.minimize(_nll, s0, (data, capped), method="L-BFGS-B", bounds=bounds)
             for s0 in starts),
            key=lambda r: r.fun,
        )  # fmt: skip
    a, b, kappa, b_noise = (float(v) for v in np.exp(best.x[:4]))
    theta_max = float(np.exp(best.x[4])) if cap else None
    rho = float(best.x[-1]) if design else 0.0
    b_noise = b_noise if b_noise > 1e-6 else 0.0
    return {
        "kappa": kappa,
        "lr_ref": lr_ref,
        "eta_ref": LearningParams.eta_ref,
        "reversal": LearningParams.reversal,
        "theta_max": theta_max,
        "b_noise": b_noise,
        "rho": rho,
        "advantage": advantage,
        "fit": {
            "model": model,
            "method": "MLE of (a, b, kappa, b_noise"
            + (", theta_max" if cap else "")
            + (", rho" if design else "")
            + ") on every group's count of every run; theta = shift of the replayed drive "
            "times 1 / (1 + b_noise / n), n = informative groups x G / (1 + (G - 1) rho)",
            "rho_fitted": design,
            "loglik": -float(best.fun),
            "loglik_rho_0": -float(no_rho.fun),
            "loglik_mean_field": -float(mf.fun),
            "converged": bool(best.success),
            "init_pass_rate": {"spec": f"beta:{a:.4g},{b:.4g}", "mean": a / (a + b)},
            "settings": [{"G": G, "B": B} for G, B in found],
            "runs": len(curves),
            "mean_field_kappa": float(np.exp(mf.x[2])),
            "steps": [len(c.G) for c in curves],
            "dynamic_sampling": curves[0].dynamic_sampling,
        },
    }
