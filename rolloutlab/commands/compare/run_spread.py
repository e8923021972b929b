"""``rolloutlab compare run-spread``: how far apart runs of one configuration straggle
(wiring only; the work is in :mod:`calibration.validation.run_spread`)."""

from __future__ import annotations

import click
import polars as pl

from rolloutlab.calibration.readers.grouped import GroupedDataError
from rolloutlab.calibration.validation.run_spread import COLUMNS, run_spread
from rolloutlab.commands.options.common import BadInput, out_option
from rolloutlab.commands.options.grouped import (
    DRAWS_OPTION,
    PROMPTS_OPTION,
    SUBSAMPLE_SEED_OPTION,
    TAU_OPTION,
    field_options,
    read_files,
    write_table,
)


@click.command("run-spread")
@click.argument("runs", nargs=-1, required=True)
@field_options
@TAU_OPTION
@click.option(
    "--from-step",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Measure only the steps >= this one (each must be logged in every run).",
)
@PROMPTS_OPTION
@DRAWS_OPTION
@SUBSAMPLE_SEED_OPTION
@out_option("Output folder.", dest="out", as_path=False)
def run_spread_cmd(runs, tau, from_step, prompts, draws, seed, out, tokenizer, **fields):
    """Measure P(max/median > tau) on each of several runs (one grouped file or run
    folder each) and each run's distance from the others' mean (run_spread.csv)."""
    if len(runs) < 2:
        raise BadInput("RUNS: need >= 2 runs (one grouped file or run folder each)")
    traces = [read_files([r], tokenizer, dict(fields)) for r in runs]
    try:
        table = run_spread(traces, tuple(tau), from_step, prompts, draws, seed)
    except (GroupedDataError, ValueError) as exc:
        raise BadInput(str(exc)) from None
    out_dir = write_table(
        out,
        "validate run-spread",
        "run_spread.csv",
        table,
        {"runs": list(runs), "tau": list(tau), "from_step": from_step, "prompts": prompts,
         "draws": draws, "seed": seed},
    )  # fmt: skip
    summary = table.group_by("run", "tau", maintain_order=True).agg(
        pl.col("dev_from_others").max().alias("max_dev_from_others"),
        pl.col("p_straggler_meas_se").max().alias("max_se"),
    )
    with pl.Config(tbl_rows=-1, tbl_hide_dataframe_shape=True, float_precision=3):
        click.echo(summary)
    click.echo(f"wrote {out_dir / 'run_spread.csv'} (columns {', '.join(COLUMNS)})")
