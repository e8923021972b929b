"""Choosing SAGC's straggler threshold ``tau`` from a length model (a calibrated run's).

SAGC constrains the long-run straggler rate to ``delta``; which ``tau`` makes that
constraint bind depends on the lengths and on the reading
(:func:`sim.trace.metrics.straggler_reading`):

* ``group`` reading: the ``tau`` at which the share of groups of size ``G`` whose own
  ``max/median`` exceeds it equals ``delta`` — the ``(1 - delta)`` quantile of the
  per-group ratios drawn at ``G``;
* ``step`` reading: the ``tau`` at which the share of steps of ``B x G`` rollouts whose
  ``max/median`` exceeds it equals ``delta`` — the ``(1 - delta)`` quantile of the
  step-level ratios.

Both read lengths drawn from the model exactly as the simulator draws a step's
(:func:`sim.models.dynamics.step_lengths`, prompts ``t B .. t B + B - 1`` of steps
``0 .. steps - 1``).
"""

from __future__ import annotations

import numpy as np
from rolloutlab.sim.models.dynamics import prompt_ids_for, step_lengths
from rolloutlab.sim.models.lengths import LengthModel
from rolloutlab.sim.trace.metrics import READINGS, group_straggler_ratio, straggler_ratio


def straggler_ratios(
    lengths: LengthModel, G: int, B: int, steps: int = 32, seed: int = 0, reading: str = "group"
) -> np.ndarray:
    """Ratios drawn from ``lengths``: ``(steps * B,)`` per-group ``max/median`` (group
    reading) or ``(steps,)`` step-level ones (step reading). Raises ValueError for
    ``G < 2`` with the group reading (a group of one never straggles), ``B`` or
    ``steps < 1``, or another reading."""
    if reading not in READINGS:
        raise ValueError(f"reading must be one of {READINGS}, got {reading!r}")
    if B < 1 or steps < 1 or G < 1 or (reading == "group" and G < 2):
        raise ValueError(f"need B >= 1, steps >= 1 and G >= {2 if reading == 'group' else 1}")
    out = []
    for t in range(steps):
        L = step_lengths(lengths, seed, t, prompt_ids_for(t, B, None), G)  # (B, G)
        out.append(group_straggler_ratio(L) if reading == "group" else [straggler_ratio(L)])
    return np.concatenate(out).astype(float)


def tau_for_rate(ratios: np.ndarray, delta: float) -> float:
    """The ``tau`` at which the share of ``ratios`` above it is ``delta``: their
    ``(1 - delta)`` quantile (``numpy.quantile``, linear). Raises ValueError for
    ``delta`` outside ``(0, 1)`` or no ratios."""
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    r = np.asarray(ratios, dtype=float)
    if r.size == 0:
        raise ValueError("no straggler ratios")
    return float(np.quantile(r, 1.0 - delta))


def choose_tau(
    lengths: LengthModel,
    G: int,
    B: int,
    delta: float,
    reading: str = "group",
    steps: int = 32,
    seed: int = 0,
) -> float:
    """``tau`` such that the straggler rate of the current ``G`` at ``B`` prompts, in
    ``reading``, equals ``delta`` (module docstring)."""
    return tau_for_rate(straggler_ratios(lengths, G, B, steps, seed, reading), delta)


def rate_table(
    lengths: LengthModel,
    Gs: list[int],
    B: int,
    taus: list[float],
    steps: int = 32,
    seed: int = 0,
) -> list[dict]:
    """Per ``G`` and ``tau``: the step-level straggler rate (share of steps with
    ``max/median > tau``) and the mean group straggler share, from drawn lengths."""
    rows = []
    for G in Gs:
        step_r = straggler_ratios(lengths, G, B, steps, seed, "step")
        group_r = straggler_ratios(lengths, G, B, steps, seed, "group") if G >= 2 else None
        for tau in taus:
            rows.append(
                {
                    "G": G,
                    "tau": tau,
                    "step_rate": float(np.mean(step_r > tau)),
                    "group_share": None if group_r is None else float(np.mean(group_r > tau)),
                }
            )
    return rows
