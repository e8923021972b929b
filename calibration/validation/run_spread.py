"""How far apart runs of one configuration are: the straggler probability measured on
each run, and each run's distance from the mean of the others.

``compare groups --held-out`` compares a model with one other run. Part of any such
error is not the model's: two runs of the same configuration (another seed, so other
prompts and another learning trajectory) straggle differently at the same steps. This
module measures that part. For runs ``r = 1..R`` (``R >= 2``) on their common steps
``>= from_step``, ``p_r(G, tau)`` is :func:`calibration.validation.groups.measure` on run
``r`` (every step's groups subsampled to ``(B, G)``), and ``dev_from_others`` is
``|p_r - mean_{q != r} p_q|``: the error of a model that knew the other runs' measured
values exactly and predicted their mean (the leave-one-run-out prediction of an ideal
model calibrated on the others). Its largest value over G and tau is the floor that a
target on unseen runs has to clear.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from rolloutlab.calibration.readers.grouped import GroupedDataError, GroupedTrace
from rolloutlab.calibration.validation.groups import check_taus, logged_batch, measure, padded

ERROR_TARGET = 0.10
"""Largest |error| of a predicted P(straggler) a cell may have against a run of another
configuration, below the run-to-run floor (ERRATA, per-sample traces issue: the decided
target is ``max(ERROR_TARGET, floor + 2 SE)``)."""

COLUMNS = (
    "run",
    "G",
    "B",
    "tau",
    "p_straggler_meas",
    "p_straggler_meas_se",
    "p_others_mean",
    "dev_from_others",
    "n_steps",
)
"""Columns of ``run_spread.csv`` (``run``: the run's position among the inputs, from 0)."""


def common_steps(runs: list[GroupedTrace], from_step: int) -> list[int]:
    """Steps ``>= from_step`` logged in every run, ascending. Raises GroupedDataError
    naming the first run's first file when there is none."""
    common = set.intersection(*(set(r.steps()) for r in runs))
    steps = sorted(s for s in common if s >= from_step)
    if not steps:
        first = runs[0].samples.row(0, named=True)
        raise GroupedDataError(
            f"{first['source']}: line {first['line']}: field 'step': no step >= {from_step} "
            "is logged in every run"
        )
    return steps


def run_spread(
    runs: list[GroupedTrace],
    taus: tuple[float, ...],
    from_step: int = 0,
    prompts: int | None = None,
    draws: int = 200,
    seed: int = 0,
) -> pl.DataFrame:
    """The table of :data:`COLUMNS`: one row per run, G in ``1..min logged G`` and tau.

    ``runs``: two or more traces (one per run); ``prompts``: B (default: the smallest
    logged B on the common steps, counting groups of the most common size G or more:
    groups may differ in size, :func:`calibration.validation.groups.subsample`). Raises
    GroupedDataError on fewer than 2 runs, a step with no group of G samples,
    no common step from ``from_step`` on,
    ``prompts`` above the logged B, or a tau <= 1."""
    if len(runs) < 2:
        raise GroupedDataError("run spread: need >= 2 runs")
    check_taus(taus)
    G = min(r.typical_group_size() for r in runs)
    steps = common_steps(runs, from_step)
    mats = []
    for r in runs:
        index = {s: i for i, s in enumerate(r.steps())}
        groups = r.groups("length")
        mats.append([padded(groups[index[s]]) for s in steps])
    b_log = min(logged_batch(r, ms, steps, G) for r, ms in zip(runs, mats, strict=True))
    B = prompts or b_log
    if B > b_log:
        raise GroupedDataError(f"--prompts {B}: above the logged B ({b_log}) of a step")
    rows = []
    for g in range(1, G + 1):
        meas = [measure(ms, B, g, taus, draws, seed) for ms in mats]
        for t in taus:
            p = np.array([m.p[t] for m in meas])
            for i, m in enumerate(meas):
                others = float(np.delete(p, i).mean())
                rows.append(
                    {
                        "run": i,
                        "G": g,
                        "B": B,
                        "tau": float(t),
                        "p_straggler_meas": float(p[i]),
                        "p_straggler_meas_se": m.p_se[t],
                        "p_others_mean": others,
                        "dev_from_others": abs(float(p[i]) - others),
                        "n_steps": len(steps),
                    }
                )
    return pl.DataFrame(rows).sort("run", "tau", "G", maintain_order=True)


def with_target(
    table: pl.DataFrame,
    runs: list[GroupedTrace],
    held_out: GroupedTrace,
    from_step: int = 0,
    draws: int = 200,
    seed: int = 0,
) -> pl.DataFrame:
    """``compare groups --held-out`` rows (``table``, one per model, G and tau) with the
    decided accuracy target of several runs of one configuration (docs/ERRATA, per-sample
    traces issue): ``floor`` is the held-out run's distance from the mean of the fit
    ``runs`` at that (B, G, tau) (:func:`run_spread` with the held-out run last),
    ``target = max(0.10, floor + 2 * p_straggler_meas_se)`` (the held-out measurement's
    standard error) and ``meets = abs_error <= target``. Cells with G above the runs'
    common G get no floor (null target and ``meets``). Raises GroupedDataError as
    :func:`run_spread`."""
    B = int(table["B"][0])
    taus = tuple(sorted(set(table["tau"].to_list())))
    spread = run_spread([*runs, held_out], taus, from_step, B, draws, seed)
    floor = spread.filter(pl.col("run") == len(runs)).select(
        "G", "tau", pl.col("dev_from_others").alias("floor")
    )
    out = table.join(floor, on=["G", "tau"], how="left", maintain_order="left")
    target = pl.max_horizontal(
        pl.lit(ERROR_TARGET), pl.col("floor") + 2 * pl.col("p_straggler_meas_se")
    )
    out = out.with_columns(pl.when(pl.col("floor").is_not_null()).then(target).alias("target"))
    return out.with_columns((pl.col("abs_error") <= pl.col("target")).alias("meets"))
