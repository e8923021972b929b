"""``validate groups --transfer``: the law of :mod:`calibration.fits.transfer` fitted and
checked as one more model of the validation table.

The dependence ``rho`` is fitted on the fit steps of the source trace (which has the
groups); the marginal of every measured step comes from the target side only: its
per-step aggregates (``aggregates``: read from ``--target-metrics``, else computed from
the measured steps' pooled lengths as verl would log them) or its pooled lengths with
the prompt ids dropped (``marginal``). Measured steps are the held-out run's, or the
same run's steps after the fit steps (a later stretch: the marginal drifts, ``rho`` stays).
"""

from __future__ import annotations

import numpy as np
from rolloutlab.calibration.fits.transfer import (
    aggregate_grid,
    empirical_grid,
    fit_rho,
    step_stats,
)
from rolloutlab.calibration.readers.grouped import GroupedDataError, GroupedTrace
from rolloutlab.calibration.readers.step_metrics import read_step_aggregates
from rolloutlab.calibration.validation.measure import eligible, padded
from rolloutlab.sim.models.copula_lengths import CopulaLengths

TRANSFERS = ("aggregates", "marginal")
"""What the target side gives (module docstring)."""


def _grid(kind: str, groups, censored, steps, cap: int, metrics: str | None) -> np.ndarray:
    """The ``(T, K)`` marginal grid of ``steps`` for ``kind`` (module docstring)."""
    if kind == "marginal":
        return empirical_grid(groups)
    if metrics is not None:
        n = {s: int(sum(len(g) for g in gs)) for s, gs in zip(steps, groups, strict=True)}
        stats_ = read_step_aggregates(metrics, steps, n, cap)
    else:
        stats_ = [step_stats(g, c, s, cap) for g, c, s in zip(groups, censored, steps, strict=True)]
    return aggregate_grid(stats_, cap)


def transfer_models(
    trace: GroupedTrace,
    fit_steps: int,
    target: tuple[list[int], list, list],
    cap: int,
    G: int,
    options: tuple[str, str | None, int, int],
) -> dict:
    """``{"transfer_<kind>": (CopulaLengths, G, 0, law)}`` for ``validate_groups``.

    ``trace``: the source, fitted on its first ``fit_steps`` steps; ``target``: the
    measured ``(steps, groups per step, censored per step)``; ``options``: ``(kind,
    metrics path or None, draws, seed)``. ``law`` names the fitted ``rho`` and, for
    comparison, the source's normal-score ICC. Raises GroupedDataError on an unknown
    kind, a source step without a group of ``G`` samples, or bad metrics
    (:func:`calibration.readers.step_metrics.read_step_aggregates`)."""
    kind, metrics, draws, seed = options
    if kind not in TRANSFERS:
        raise GroupedDataError(f"--transfer: expected one of {TRANSFERS}, got {kind!r}")
    src_steps = trace.steps()[:fit_steps]
    src_groups = trace.groups("length")[:fit_steps]
    src_cens = trace.groups("censored")[:fit_steps]
    mats = [padded(g) for g in src_groups]
    B = min(eligible(m, G) for m in mats)
    if B < 1:
        raise GroupedDataError(f"--transfer: a fit step of the source has no group of {G} samples")
    steps, groups, censored = target
    grid = _grid(kind, groups, censored, steps, cap, metrics)  # bad metrics: before the fit
    src_grid = _grid(kind, src_groups, src_cens, src_steps, cap, None)
    fit = fit_rho(mats, src_grid, src_steps, cap, B, G, min(draws, 50), seed)
    law = f"copula rho={fit.rho:.2f} (source ICC {fit.icc:.2f}), {kind}"
    return {f"transfer_{kind}": (CopulaLengths(grid, tuple(steps), fit.rho, cap), G, 0, law)}
