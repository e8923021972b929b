"""Time to a target reward: verl runs as logged beside ``rolloutlab sim`` on a calibration.

For each verl TensorBoard run folder: the measured time to target, by the simulator's own
rule (:func:`rolloutlab.sim.models.learning.time_to_target`: the first step whose
trailing 10-step mean of ``critic/score/mean`` reaches the target, at the summed
``timing_s/step`` up to it; steps without both tags are left out). For each simulated
output folder (``rolloutlab sim ... --out DIR``): the ``time_to_target_s`` of every row of
its ``summary.csv``. Printed as one table, seconds; the relative error of each simulated
value against each measured run is printed beside it (``pred / measured - 1``, a
fraction; only rows at the measured run's setting compare), and the step count that
reaches it (the simulated run's steps ending by then, from its ``steps.parquet``).

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

Each rule's error against a measured run is ``rule / measured - 1`` in time and in steps.

Usage: python bench/verl_time_to_target.py --verl RUN_DIR [--verl ...] --sim DIR [--sim ...]
[--target 0.9]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl
from rolloutlab.calibration.readers.verl_tb import read_run
from rolloutlab.sim.models.learning import time_to_target


def measured(run_dir: Path, target: float) -> tuple[float | None, int | None]:
    """(time to ``target`` in s, the step reaching it) of one verl run folder; (None,
    None) when the trailing mean never reaches it. Raises ``VerlLogError`` on a bad log."""
    table = (
        read_run(run_dir)
        .select("step", pl.col("critic/score/mean").alias("reward_mean"), "timing_s/step")
        .drop_nulls()
        .sort("step")
        .with_columns(pl.col("timing_s/step").cum_sum().alias("t_end"))
    )
    t = time_to_target(table, target)
    if t is None:
        return None, None
    return t, int(table.filter(pl.col("t_end") == t)["step"][0])


def simulated(out_dir: Path) -> pl.DataFrame:
    """``controller``, ``pipeline``, ``time_to_target_s`` of a ``sim`` output folder."""
    return pl.read_csv(out_dir / "summary.csv").select(
        pl.lit(out_dir.name).alias("sim"), "controller", "pipeline", "time_to_target_s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--verl", type=Path, action="append", required=True)
    ap.add_argument("--sim", type=Path, action="append", required=True)
    ap.add_argument("--target", type=float, default=0.9)
    args = ap.parse_args()
    runs = {d.name: measured(d, args.target) for d in args.verl}
    for name, (t, step) in runs.items():
        print(f"measured {name}: time to {args.target} = {t} s (step {step})")
    table = pl.concat([simulated(d) for d in args.sim])
    for name, (t, _) in runs.items():
        if t is not None:
            table = table.with_columns((pl.col("time_to_target_s") / t - 1).alias(f"err_{name}"))
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=120):
        print(table)


if __name__ == "__main__":
    main()
