"""Time to a target reward: verl runs as logged beside ``rolloutlab sim`` on a calibration.

For each verl TensorBoard run folder: the measured time to target, by the simulator's own
rule (:func:`rolloutlab.sim.models.learning.time_to_target`: the first step whose
trailing 10-step mean of ``critic/score/mean`` reaches the target, at the summed
``timing_s/step`` up to it; steps without both tags are left out). For each simulated
output folder (``rolloutlab sim ... --out DIR``): the ``time_to_target_s`` of every row of
its ``summary.csv`` and the step count that reaches it (the simulated run's steps ending
by then, from its ``steps.parquet``). Printed as two tables, seconds and steps: the naive
rules below, then the simulated rows; beside each, its relative error against each
measured run (``pred / measured - 1``, a fraction, in time and in steps; only rows at the
measured run's setting compare).

Naive rules, from the first ``--verl`` run (the calibration run) only, each giving a step
count ``n`` and a time, beside every other ``--verl`` run (fixed before they were computed
on a held-out run):

- ``constant``: the calibration run's own measured time to target and step, by the rule
  above (its own reward curve on its own clock; carried unchanged to the other run).
- ``linear``: the least-squares line of the calibration run's per-step
  ``critic/score/mean`` against the verl step, over its steps with both tags
  (``numpy.polyfit`` degree 1: the ``linear`` rule of
  :func:`rolloutlab.calibration.fits.verl_learning.naive_curves`, the same line as the
  held-out reward-curve table of docs/learning.md), evaluated at steps 1, 2, ...,
  :data:`MAX_STEPS`; the rule above on that line (first full 10-step window whose mean
  reaches the target) gives ``n``; time = ``n`` x the calibration run's mean
  ``timing_s/step`` over the same steps. A line that does not reach the target by
  :data:`MAX_STEPS` (e.g. a slope <= 0) gives no step and no time ("never").
- ``persistence``: the calibration run's last logged reward carried forward from step 1
  (the ``persistence`` rule of ``naive_curves``): a flat curve reaches the target at the
  first full window (``n`` = 10) when that reward is >= the target, else never; priced
  as ``linear``.

Usage: python bench/verl_time_to_target.py --verl RUN_DIR [--verl ...] --sim DIR [--sim ...]
[--target 0.9]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import polars as pl
from rolloutlab.calibration.fits.verl_learning import naive_curves
from rolloutlab.calibration.readers.verl_tb import read_run
from rolloutlab.sim.models.learning import time_to_target

MAX_STEPS = 10_000
"""Steps over which a naive rule's reward curve is searched for the target."""

WINDOW = 10
"""Trailing window of :func:`time_to_target` (its default), in steps."""


def curve(run_dir: Path) -> pl.DataFrame:
    """``step``, ``reward_mean`` (``critic/score/mean``), ``timing_s/step`` and ``t_end``
    (their cumulative sum, s) of a verl run folder: steps holding both tags, by step.
    Raises ``VerlLogError`` on a bad log."""
    return (
        read_run(run_dir)
        .select("step", pl.col("critic/score/mean").alias("reward_mean"), "timing_s/step")
        .drop_nulls()
        .sort("step")
        .with_columns(pl.col("timing_s/step").cum_sum().alias("t_end"))
    )


def reached(table: pl.DataFrame, target: float) -> tuple[float | None, int | None]:
    """(time to ``target`` in s, the ``step`` reaching it) of a table with ``step``,
    ``reward_mean`` and ``t_end``, by :func:`time_to_target`; (None, None) when never."""
    t = time_to_target(table, target, WINDOW)
    if t is None:
        return None, None
    return t, int(table.filter(pl.col("t_end") == t)["step"][0])


def measured(run_dir: Path, target: float) -> tuple[float | None, int | None]:
    """(time to ``target`` in s, the step reaching it) of one verl run folder; (None,
    None) when the trailing mean never reaches it. Raises ``VerlLogError`` on a bad log."""
    return reached(curve(run_dir), target)


def naive_rules(cal: pl.DataFrame, target: float) -> dict[str, tuple[float | None, int | None]]:
    """(time in s, step count) of each naive rule of the module docstring, from the
    calibration run's :func:`curve` ``cal``: ``constant``, ``linear``, ``persistence``
    ((None, None) for a rule that never reaches ``target``)."""
    grid = np.arange(1, MAX_STEPS + 1)
    curves = naive_curves(cal["step"].to_numpy(), cal["reward_mean"].to_numpy(), grid)
    step_s = float(cal["timing_s/step"].mean())
    out = {"constant": reached(cal, target)}
    for rule in ("linear", "persistence"):
        line = pl.DataFrame({"step": grid, "reward_mean": curves[rule], "t_end": grid * step_s})
        out[rule] = reached(line, target)
    return out


def simulated(out_dir: Path) -> pl.DataFrame:
    """``sim``, ``controller``, ``pipeline``, ``time_to_target_s`` of a ``sim`` output
    folder's ``summary.csv``, and ``step``: how many of the run's steps (``run_id`` = the
    controller, in ``steps.parquet``) end by ``time_to_target_s`` (null without that file
    or a time)."""
    table = pl.read_csv(out_dir / "summary.csv").select(
        pl.lit(out_dir.name).alias("sim"), "controller", "pipeline", "time_to_target_s"
    )
    path = out_dir / "steps.parquet"
    if not path.exists():
        return table.with_columns(pl.lit(None, pl.Int64).alias("step"))
    steps = pl.read_parquet(path, columns=["run_id", "t_end"])
    counts = [
        None if t is None else steps.filter((pl.col("run_id") == c) & (pl.col("t_end") <= t)).height
        for c, t in zip(table["controller"], table["time_to_target_s"])
    ]
    return table.with_columns(pl.Series("step", counts, pl.Int64))


def with_errors(table: pl.DataFrame, runs: dict[str, tuple[float | None, int | None]]):
    """``table`` (``time_to_target_s``, ``step``) with ``err_<run>`` (time) and
    ``err_steps_<run>`` (steps), ``pred / measured - 1``, for each run that reached."""
    for name, (t, n) in runs.items():
        if t is not None:
            table = table.with_columns(
                (pl.col("time_to_target_s") / t - 1).alias(f"err_{name}"),
                (pl.col("step") / n - 1).alias(f"err_steps_{name}"),
            )
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--verl", type=Path, action="append", required=True)
    ap.add_argument("--sim", type=Path, action="append", required=True)
    ap.add_argument("--target", type=float, default=0.9)
    args = ap.parse_args()
    curves = {d.name: curve(d) for d in args.verl}
    runs = {name: reached(c, args.target) for name, c in curves.items()}
    for name, (t, step) in runs.items():
        print(f"measured {name}: time to {args.target} = {t} s (step {step})")
    cal_name, cal = next(iter(curves.items()))
    naive = pl.DataFrame(
        {
            "rule": list(rules := naive_rules(cal, args.target)),
            "time_to_target_s": [t for t, _ in rules.values()],
            "step": [n for _, n in rules.values()],
        },
        schema={"rule": pl.String, "time_to_target_s": pl.Float64, "step": pl.Int64},
    )
    held = {k: v for k, v in runs.items() if k != cal_name}
    table = pl.concat([simulated(d) for d in args.sim])
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=160):
        print(f"naive rules from {cal_name} (never is null):")
        print(with_errors(naive, held))
        print(with_errors(table, runs))


if __name__ == "__main__":
    main()
