"""``compare groups --transfer``: the law of :mod:`calibration.fits.transfer` fitted and
checked as one more model of the validation table.

The dependence ``rho`` is fitted on the fit steps of the source trace (which has the
groups); the marginal of every measured step comes from the target side only: its
per-step aggregates (``aggregates``: read from ``--target-metrics``, else computed from
the measured steps' pooled lengths as verl would log them) or each step's pooled lengths
with the prompt ids dropped, dealt back into groups by ``rho`` (``marginal``,
:class:`sim.models.regrouped_lengths.RegroupedLengths`; at the logged ``G`` and ``B`` it
reproduces the step exactly, so only smaller ``G`` test it). Measured steps are the held-out run's, or the
same run's steps after the fit steps (a later stretch: the marginal drifts, ``rho`` stays).

Beside the law, the naive rule with the same information: ``rho`` = 0 on the same target
marginal (each step's pooled lengths subsampled without replacement, or i.i.d. draws
from its aggregates), so the table shows what the source's ``rho`` adds.
"""

from __future__ import annotations

import numpy as np
from rolloutlab.calibration.fits.transfer import aggregate_grid, fit_rho, step_stats
from rolloutlab.calibration.readers.grouped import GroupedDataError, GroupedTrace
from rolloutlab.calibration.readers.step_metrics import read_step_aggregates
from rolloutlab.calibration.validation.measure import eligible, padded
from rolloutlab.sim.models.copula_lengths import CopulaLengths
from rolloutlab.sim.models.regrouped_lengths import RegroupedLengths

TRANSFERS = ("aggregates", "marginal")
"""What the target side gives (module docstring)."""

NAIVE_SUFFIX = "_rho0"
"""Name suffix of the same-information naive rule's model (``rho`` = 0)."""


def _aggregates_grid(groups, censored, steps, cap: int, metrics: str | None) -> np.ndarray:
    """The ``(T, K)`` lognormal-from-aggregates grid of ``steps`` (module docstring)."""
    if metrics is not None:
        n = {s: int(sum(len(g) for g in gs)) for s, gs in zip(steps, groups, strict=True)}
        stats_ = read_step_aggregates(metrics, steps, n, cap)
    else:
        stats_ = [step_stats(g, c, s, cap) for g, c, s in zip(groups, censored, steps, strict=True)]
    return aggregate_grid(stats_, cap)


def _factory(kind: str, side: tuple, cap: int, G: int, B: int, metrics: str | None):
    """``rho -> length model`` on one side's ``(steps, groups, censored)``."""
    steps, groups, censored = side
    if kind == "marginal":
        pooled = tuple(np.concatenate(g) for g in groups)
        return lambda rho: RegroupedLengths(pooled, tuple(steps), rho, G, B, cap)
    grid = _aggregates_grid(groups, censored, steps, cap, metrics)
    return lambda rho: CopulaLengths(grid, tuple(steps), rho, cap)


def transfer_models(
    trace: GroupedTrace,
    fit_steps: int,
    target: tuple[list[int], list, list],
    cap: int,
    G: int,
    options: tuple[str, str | None, int, int, int],
) -> dict:
    """``{"transfer_<kind>": (model, G, 0, law), "transfer_<kind>_rho0": (...)}`` for
    ``validate_groups``: the fitted law and the same-information naive rule (``rho`` = 0,
    nothing taken from the source).

    ``trace``: the source, fitted on its first ``fit_steps`` steps; ``target``: the
    measured ``(steps, groups per step, censored per step)``; ``options``: ``(kind,
    metrics path or None, B, draws, seed)``. The model is
    :class:`sim.models.copula_lengths.CopulaLengths` (``aggregates``) or
    :class:`sim.models.regrouped_lengths.RegroupedLengths` (``marginal``). ``law`` names
    the fitted ``rho``, the source's normal-score ICC and the fit's RMSE on the source
    (how well the law describes the run it was fitted on). Raises
    GroupedDataError on an unknown kind, a source step without a group of ``G``
    samples, or bad metrics (:func:`calibration.readers.step_metrics.read_step_aggregates`)."""
    kind, metrics, B, draws, seed = options
    if kind not in TRANSFERS:
        raise GroupedDataError(f"--transfer: expected one of {TRANSFERS}, got {kind!r}")
    make_target = _factory(kind, target, cap, G, B, metrics)  # bad metrics: before the fit
    src = (
        trace.steps()[:fit_steps],
        trace.groups("length")[:fit_steps],
        trace.groups("censored")[:fit_steps],
    )
    mats = [padded(g) for g in src[1]]
    b_src = min(eligible(m, G) for m in mats)
    if b_src < 1:
        raise GroupedDataError(f"--transfer: a fit step of the source has no group of {G} samples")
    b_fit = min(b_src, B)
    fit = fit_rho(mats, _factory(kind, src, cap, G, b_fit, None), b_fit, G, min(draws, 50), seed)
    law = f"copula rho={fit.rho:.2f} (source ICC {fit.icc:.2f}, source RMSE {fit.rmse:.3f}), {kind}"
    return {
        f"transfer_{kind}": (make_target(fit.rho), G, 0, law),
        f"transfer_{kind}{NAIVE_SUFFIX}": (make_target(0.0), G, 0, f"naive rho=0, {kind}"),
    }
