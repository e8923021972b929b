"""A within-group law that transfers: the target run's per-step marginal, the source
run's within-group dependence.

The law: at step ``t`` a sample's length has the target's marginal ``Q_t``; samples of one prompt are tied by one
parameter ``rho`` (a Gaussian-copula random effect, the intra-class correlation of normal
scores). The two halves come from different places:

* ``Q_t`` from what a user of the target run has without per-sample group structure:
  verl's per-step aggregates ``response_length/mean``, ``/max``, ``/min``,
  ``/clip_ratio`` (:func:`aggregate_grid`: the right-censored lognormal of
  :func:`calibration.fits.lengths_fit.fit_step` per step, drawn by
  :class:`sim.models.copula_lengths.CopulaLengths`), or the step's pooled lengths with the
  prompt ids dropped, dealt back into groups (:class:`sim.models.regrouped_lengths.RegroupedLengths`).
* ``rho`` from the source run, which has the groups: :func:`fit_rho` picks, on a grid,
  the ``rho`` whose predicted ``P(max/median > tau)`` over ``G = 1..G_logged`` is
  closest (least squares) to the source's own measured one, with the source's ``Q_t``
  built the same way as the target's; ``taus`` are quantiles of the source's own
  measured ratio, so the fit uses no target information. :func:`normal_score_icc` (the
  one-way ANOVA ICC of normal scores, Shrout & Fleiss 1979, case 1) is the moment
  alternative, reported beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from rolloutlab.calibration.fits.lengths_fit import StepLengthStats, fit_step
from rolloutlab.calibration.validation.measure import measure, step_ratio
from scipy import special, stats

GRID_SIZE = 1024
"""``K``: quantile points per step of a parametric marginal."""

RHO_GRID = tuple(float(r) for r in np.round(np.linspace(0.0, 0.95, 20), 2))
"""Candidate values of ``rho`` searched by :func:`fit_rho`."""


def step_stats(groups: list[np.ndarray], censored: list[np.ndarray], step: int, cap: int):
    """verl's per-step aggregates of one step's groups (lengths in tokens) as a
    :class:`calibration.fits.lengths_fit.StepLengthStats` (``clip_ratio``: censored share)."""
    x = np.concatenate(groups).astype(np.float64)
    return StepLengthStats(
        step=step,
        mean=float(x.mean()),
        max=float(x.max()),
        min=float(x.min()),
        clip_ratio=float(np.concatenate(censored).mean()),
        n=x.size,
        cap=cap,
    )


def aggregate_grid(stats_: list[StepLengthStats], cap: int, size: int = GRID_SIZE) -> np.ndarray:
    """``(T, size)`` quantile grid: per step, the censored lognormal fitted to its mean,
    max, min and clip ratio (:func:`calibration.fits.lengths_fit.fit_step`) at
    probabilities ``(k + 1/2) / size``, ``ceil``-ed and clipped to ``[1, cap]``. Raises
    ValueError (naming the step) on inconsistent statistics."""
    p = special.ndtri((np.arange(size) + 0.5) / size)
    rows = []
    for s in stats_:
        f = fit_step(s)
        rows.append(np.clip(np.ceil(np.exp(f.mu + f.sigma * p)), 1, cap))
    return np.asarray(rows, dtype=np.int64)


def normal_score_icc(steps: list[list[np.ndarray]]) -> float:
    """Mean over steps of the one-way ANOVA ICC of normal scores (each step's lengths
    ranked, mid-ranks on ties, ``Phi^-1((rank - 1/2) / n)``), clipped to ``[0, 1]``;
    groups may differ in size (ANOVA with ``n0``, Shrout & Fleiss 1979)."""
    out = []
    for groups in steps:
        x = np.concatenate(groups).astype(np.float64)
        z = special.ndtri((stats.rankdata(x) - 0.5) / x.size)
        sizes = np.array([len(g) for g in groups])
        idx = np.repeat(np.arange(len(groups)), sizes)
        means = np.bincount(idx, z) / sizes
        a, n = len(groups), x.size
        if a < 2 or n <= a:
            continue
        msb = float((sizes * (means - z.mean()) ** 2).sum() / (a - 1))
        msw = float(((z - means[idx]) ** 2).sum() / (n - a))
        n0 = (n - (sizes**2).sum() / n) / (a - 1)
        out.append((msb - msw) / (msb + (n0 - 1) * msw))
    return float(np.clip(np.mean(out), 0.0, 1.0)) if out else 0.0


@dataclass(frozen=True)
class RhoFit:
    """What :func:`fit_rho` found on the source run."""

    rho: float
    """The chosen ``rho``."""
    rmse: float
    """Root mean square error of ``P(straggler)`` on the source at that ``rho``."""
    taus: tuple[float, ...]
    """The source's ratio quantiles the fit matched."""
    icc: float
    """:func:`normal_score_icc` of the source, for comparison."""


def predicted_p(model, B: int, G_max: int, taus, reps: int, seed: int):
    """``(G_max, len(taus))`` mean over the model's steps of ``P(max/median > tau)`` of
    ``reps`` simulated steps of ``B`` prompts at each ``G = 1..G_max`` (``model``: a
    length model with a ``steps`` attribute, :class:`CopulaLengths` or
    :class:`sim.models.regrouped_lengths.RegroupedLengths`)."""
    rng = np.random.default_rng(seed)
    hits = np.zeros((G_max, len(taus)))
    for s in model.steps:
        draws = model.sample(rng, B * reps, G_max, s).reshape(reps, B, G_max)
        for g in range(G_max):
            r = step_ratio(draws[:, :, : g + 1])
            hits[g] += [(r > t).mean() for t in taus]
    return hits / len(model.steps)


def fit_rho(
    mats: list[np.ndarray],
    make_model: Callable[[float], Any],
    B: int,
    G: int,
    draws: int = 50,
    seed: int = 0,
) -> RhoFit:
    """Least-squares ``rho`` on :data:`RHO_GRID` (module docstring): the source's
    measured ``P(straggler)`` (``mats``: :func:`calibration.validation.measure.padded`
    steps; ``B`` prompts, ``G = 1..G``) against ``make_model(rho)`` (a length model with
    a ``steps`` attribute: the source's steps, its marginal built as the target's will
    be), at taus = the 25/50/75 % quantiles of the source's measured ratio at ``G // 2``."""
    half = measure(mats, B, max(G // 2, 1), (2.0,), draws, seed).ratios
    taus = tuple(float(t) for t in np.unique(np.quantile(half, [0.25, 0.5, 0.75])) if t > 1)
    taus = taus or (float(half.max()),)
    meas = np.array(
        [[measure(mats, B, g, taus, draws, seed).p[t] for t in taus] for g in range(1, G + 1)]
    )
    errs = []
    for rho in RHO_GRID:
        pred = predicted_p(make_model(float(rho)), B, G, taus, max(draws // 2, 10), seed + 1)
        errs.append(float(np.sqrt(np.mean((pred - meas) ** 2))))
    best = int(np.argmin(errs))
    steps_groups = [[m[i][np.isfinite(m[i])] for i in range(len(m))] for m in mats]
    return RhoFit(float(RHO_GRID[best]), errs[best], taus, normal_score_icc(steps_groups))
