"""``rolloutlab compare verl-tb``: the step-time model fitted on each verl run's first
K steps, predicting the later steps' ``timing_s/gen`` (wiring only; the work is in
:mod:`calibration.validation.verl_holdout`).

Every bad input ends in one line naming the file and tag/field, exit code 2, and no
output folder left behind.
"""

from __future__ import annotations

import click

from rolloutlab.calibration.validation.step_holdout import (
    fit_config,
    heldout_steps,
    part_shares,
    score,
)
from rolloutlab.calibration.validation.verl_holdout import validate_runs
from rolloutlab.commands.calibrate.group import BAD_INPUT, run_dir_args, verl_config, verl_options
from rolloutlab.commands.options.common import claimed, fail, out_option
from rolloutlab.commands.options.terminal import echo_table
from rolloutlab.sim.scenario.provenance import write_config
from rolloutlab.sim.scenario.scenario import load_scenario
from rolloutlab.sim.trace.progress import progress_bar


@click.command("verl-tb")
@click.argument("run_dirs", nargs=-1, required=True)
@click.option(
    "--fit-steps",
    "-k",
    default=20,
    show_default=True,
    type=click.IntRange(min=2),
    help="Fit on the first K usable steps.",
)
@out_option(
    "Folder for validation.csv and config.json (new, or an earlier compare verl-tb output).",
    dest="out",
    as_path=False,
)
@click.option(
    "--calibration",
    "calibration",
    type=click.Path(dir_okay=False),
    default=None,
    help="Score the whole step (every phase) of RUN_DIRS with this verl-tb calibration "
    "(runs it never read, or the steps after its --fit-steps) beside the constant, linear "
    "and persistence rules; writes steps.csv and validation.csv.",
)
@verl_options
def validate_verl_tb(
    run_dirs,
    fit_steps,
    out,
    calibration,
    **logged,
):
    """Fit on each run's first K steps, predict timing_s/gen of the later steps; with
    --calibration, predict each held-out step whole (docs/step_phases.md)."""
    if calibration is not None:
        return _validate_whole_step(run_dirs, calibration, out)
    cfg = verl_config(**logged)
    runs = run_dir_args(run_dirs)
    with claimed(out, "validate-verl-tb") as out_dir:
        try:
            with progress_bar(total=len(runs), desc="compare verl-tb", unit="run") as bar:
                table = validate_runs(runs, fit_steps, cfg, progress=lambda _: bar.update())
        except BAD_INPUT as exc:
            fail(exc)
        tmp = out_dir / ".validation.csv.tmp"
        table.write_csv(tmp, float_precision=4)
        tmp.replace(out_dir / "validation.csv")
        write_config(
            out_dir / "config.json",
            {"command": "validate-verl-tb", "runs": runs, "fit_steps": fit_steps, **logged},
        )
    echo_table(table, precision=4)
    click.echo(f"wrote {out_dir / 'validation.csv'}")


def _validate_whole_step(run_dirs, calibration: str, out) -> None:
    """``compare verl-tb --calibration``: the whole step of held-out runs, scored."""
    runs = run_dir_args(run_dirs)
    try:
        sc = load_scenario(calibration)
        cfg = fit_config(sc)
    except BAD_INPUT as exc:
        fail(exc)
    with claimed(out, "validate-verl-tb") as out_dir:
        try:
            with progress_bar(total=len(runs), desc="compare verl-tb", unit="run") as bar:
                steps = heldout_steps(sc, runs, cfg, progress=lambda _: bar.update())
        except BAD_INPUT as exc:
            fail(exc)
        table = score(steps)
        for name, df in (("steps.csv", steps), ("validation.csv", table)):
            tmp = out_dir / f".{name}.tmp"
            df.write_csv(tmp, float_precision=4)
            tmp.replace(out_dir / name)
        write_config(
            out_dir / "config.json",
            {
                "command": "validate-verl-tb",
                "runs": runs,
                "calibration": calibration,
                "fitted_runs": list(sc.source["provenance"]["runs"]),
            },
        )
    click.echo(
        f"whole step (timing_s/step) of {', '.join(table['run'].unique(maintain_order=True))} "
        f"predicted by {calibration} (runs it fitted: "
        f"{', '.join(sc.source['provenance']['runs'])}); error = |pred / measured - 1|, "
        "'_plain' = steps without a periodic phase; persistence reads the held-out run's "
        "previous step"
    )
    echo_table(table, precision=4)
    click.echo(
        "every phase, mean s per scored step and share of the step (measured: verl's "
        "timing_s/*; sync: timed inside gen by verl):"
    )
    echo_table(part_shares(steps), precision=3)
    click.echo(f"wrote {out_dir / 'steps.csv'}, validation.csv, config.json")
