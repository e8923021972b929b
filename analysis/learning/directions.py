"""Does the learning law move steps-to-target the way the runs do, in G and in B?
(``learning_directions.csv`` of ``rolloutlab compare learning``,
docs/learning.md §5).

Per (G, B) setting the measured steps to target are averaged over the seeds that reached
it; along each axis (G at a fixed B, B at a fixed G) every pair of neighbouring settings
gives one row: the measured change of the mean steps, its standard error
``sqrt(sd_lo^2 / n_lo + sd_hi^2 / n_hi)`` (sample sds, ddof 1), the predicted change (of
the mean of the runs' own predictions), whether the measured change is *resolved*
(``|change| >= 2 se``: the seeds tell the direction) and whether the predicted change has
its sign (``agree``; a predicted change of 0 agrees with nothing). Unresolved pairs are
reported, not scored: a direction the runs cannot tell cannot be got right or wrong.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
from rolloutlab.calibration.fits.learning_noise_fit import settings
from rolloutlab.calibration.readers.run_curve import read_run

DIRECTION_COLUMNS = [
    "axis", "fixed", "low", "high", "measured_change", "measured_se", "predicted_change",
    "resolved", "agree",
]  # fmt: skip
"""Columns of :func:`direction_table` (``fixed``: the other axis's value)."""


def _setting_means(runs: pl.DataFrame) -> dict[tuple[int, int], tuple[float, float, int, float]]:
    """(G, B) -> (measured mean steps, sd (NaN with one run), n, predicted mean steps)."""
    out = {}
    for (G, B), g in runs.group_by("G", "B"):
        ok = g.filter(pl.col("measured_steps_to_target").is_not_null())
        meas = ok["measured_steps_to_target"].to_numpy().astype(float)
        pred = ok["predicted_steps_to_target"].drop_nulls().to_numpy().astype(float)
        if meas.size == 0 or pred.size == 0:
            continue
        sd = float(np.std(meas, ddof=1)) if meas.size > 1 else math.nan
        out[(int(G), int(B))] = (float(meas.mean()), sd, int(meas.size), float(pred.mean()))
    return out


def direction_table(runs: pl.DataFrame) -> pl.DataFrame:
    """:data:`DIRECTION_COLUMNS`, one row per pair of neighbouring settings along G (at each
    B) and along B (at each G) (module docstring). ``runs``: one row per run with ``G``,
    ``B`` (ints) and ``measured_steps_to_target`` / ``predicted_steps_to_target`` (null =
    never reached; such runs are left out of their setting's means). Empty when no axis
    holds two settings. Raises KeyError naming a missing column."""
    for c in ("G", "B", "measured_steps_to_target", "predicted_steps_to_target"):
        if c not in runs.columns:
            raise KeyError(f"direction_table: column {c!r} missing")
    means = _setting_means(runs)
    rows = []
    for axis, other in (("G", "B"), ("B", "G")):
        idx, fix = (0, 1) if axis == "G" else (1, 0)
        for fixed in sorted({k[fix] for k in means}):
            line = sorted((k for k in means if k[fix] == fixed), key=lambda k: k[idx])
            for lo, hi in zip(line, line[1:]):
                (m0, s0, n0, p0), (m1, s1, n1, p1) = means[lo], means[hi]
                se = math.sqrt(s0**2 / n0 + s1**2 / n1)
                dm, dp = m1 - m0, p1 - p0
                rows.append({
                    "axis": axis, "fixed": f"{other}={fixed}", "low": lo[idx], "high": hi[idx],
                    "measured_change": dm, "measured_se": se, "predicted_change": dp,
                    "resolved": bool(math.isfinite(se) and abs(dm) >= 2 * se),
                    "agree": bool(np.sign(dp) == np.sign(dm) and dp != 0),
                })  # fmt: skip
    schema = {
        "axis": pl.String, "fixed": pl.String, "low": pl.Int64, "high": pl.Int64,
        "measured_change": pl.Float64, "measured_se": pl.Float64,
        "predicted_change": pl.Float64, "resolved": pl.Boolean, "agree": pl.Boolean,
    }  # fmt: skip
    return pl.DataFrame(rows, schema=schema)


def run_settings(run_dirs: list[Path]) -> pl.DataFrame:
    """``run`` (directory name), ``G``, ``B``: each run's median group size and prompt batch
    (:func:`calibration.fits.learning_noise_fit.settings`). Raises RunDataError naming a run
    that cannot be read."""
    rows = []
    for d in run_dirs:
        ((G, B),) = settings([read_run(d)])
        rows.append({"run": Path(d).name, "G": G, "B": B})
    return pl.DataFrame(rows, schema={"run": pl.String, "G": pl.Int64, "B": pl.Int64})


def directions_of(table: pl.DataFrame, run_dirs: list[Path]) -> pl.DataFrame:
    """:func:`direction_table` of a ``compare learning`` per-run ``table`` whose runs are
    ``run_dirs`` (in its order; (G, B) read from each run)."""
    return direction_table(table.with_columns(run_settings(run_dirs).drop("run")))
