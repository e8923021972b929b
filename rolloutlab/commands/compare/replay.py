"""``rolloutlab compare replay``: a simulated run's controllers replayed against the
per-sample log it was calibrated on (wiring only; the work is in
:mod:`calibration.validation.replay`)."""

from __future__ import annotations

from pathlib import Path

import click

from rolloutlab.calibration.readers.grouped import GroupedDataError
from rolloutlab.calibration.validation.replay import COLUMNS, replay
from rolloutlab.commands.options.common import BadInput, out_option
from rolloutlab.commands.options.grouped import (
    SUBSAMPLE_SEED_OPTION,
    TAU_OPTION,
    field_options,
    read_files,
    write_table,
)
from rolloutlab.commands.options.terminal import echo_table
from rolloutlab.sim.trace import schema as sim_trace


@click.command("replay")
@click.argument("files", nargs=-1, required=True)
@field_options
@click.option(
    "--sim",
    "sim_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder of a `rolloutlab sim` run (its rollouts.parquet), e.g. one calibrated on FILES.",
)
@TAU_OPTION
@click.option(
    "--draws",
    default=50,
    show_default=True,
    type=click.IntRange(min=1),
    help="Subsamples per step.",
)
@SUBSAMPLE_SEED_OPTION
@out_option("Output folder.", dest="out", as_path=False)
def replay_cmd(files, sim_dir, tau, draws, seed, out, tokenizer, **fields):
    """Per controller of a simulated run: predicted against measured P(max/median > tau)
    and length idle share, measured on the logged steps at the G each controller chose
    (replay.csv)."""
    trace = read_files(files, tokenizer, dict(fields))
    path = Path(sim_dir) / "rollouts.parquet"
    try:
        rollouts = sim_trace.read(path, "rollouts")
    except sim_trace.TraceError as exc:
        raise BadInput(f"--sim: {exc}") from None
    try:
        table = replay(trace, rollouts, tuple(tau), draws, seed)
    except (GroupedDataError, ValueError) as exc:
        raise BadInput(str(exc)) from None
    config = {"files": list(files), "sim": sim_dir, "tau": list(tau), "draws": draws, "seed": seed}
    out_dir = write_table(out, "validate replay", "replay.csv", table, config)
    echo_table(table.drop("n_steps"))
    click.echo(f"wrote {out_dir / 'replay.csv'} (columns {', '.join(COLUMNS)})")
