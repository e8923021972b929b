"""``rolloutlab compare groups``: predicted against measured straggler rate per G on a
grouped per-sample run's held-out steps or another run, or the forecast of its later
steps (the study is :mod:`rolloutlab.analysis.groups.compare`; the options it shares with
``calibrate groups`` are :mod:`rolloutlab.commands.options.grouped`).

Every bad input ends in one line naming the file, line and field, exit code 2, and
nothing written (all reading and fitting happens before the output is claimed).
"""

from __future__ import annotations

import click
import polars as pl

from rolloutlab.calibration.validation.forecast import MODELS, RULES, ForecastConfig
from rolloutlab.calibration.validation.groups import COLUMNS, ValidationConfig
from rolloutlab.calibration.validation.transfer import TRANSFERS
from rolloutlab.commands.options.common import BadInput, claim, out_option, renamed_option
from rolloutlab.commands.options.grouped import (
    DRAWS_OPTION,
    PROMPTS_OPTION,
    TAU_OPTION,
    check_step_window,
    field_names,
    reader_options,
    write_table,
)
from rolloutlab.commands.options.types import POSITIVE_INT


@click.command("groups")
@reader_options
@click.option(
    "--fit-steps",
    "-k",
    type=click.IntRange(min=2),
    default=None,
    help="Fit on the first K steps (required without --held-out; with it, default all).",
)
@click.option(
    "--held-out",
    "held_out",
    multiple=True,
    type=click.Path(exists=True),
    help="Another run's grouped file(s) (same configuration): measure on every step of it "
    "instead of the later steps of FILE (repeatable).",
)
@click.option(
    "--from-step",
    type=click.IntRange(min=0),
    default=None,
    help="With --held-out: measure only its steps >= this one (default: all).",
)
@TAU_OPTION
@out_option("Output folder.", dest="out", as_path=False)
@PROMPTS_OPTION
@click.option(
    "--fit-group-size",
    type=click.IntRange(min=0),
    default=None,
    help="G of the extrapolation fit (default: logged G // 2; 0: none).",
)
@DRAWS_OPTION
@click.option(
    "--reps",
    default=300,
    show_default=True,
    type=POSITIVE_INT,
    help="Simulated steps per held-out step (>= 1).",
)
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Seed of the subsamples and simulated steps (>= 0).",
)
@click.option(
    "--transfer",
    type=click.Choice(TRANSFERS),
    default=None,
    help=(
        "Check only the transfer law: the within-group dependence rho fitted on FILE, "
        "each held-out step's lengths from the held-out run alone: 'aggregates' (its "
        "response_length/* per step, see --target-metrics) or 'marginal' (its pooled "
        "lengths, regrouped)."
    ),
)
@click.option(
    "--target-metrics",
    type=click.Path(exists=True),
    default=None,
    help="Measured run's response_length/* per step (TensorBoard dir, .jsonl, .csv).",
)
@click.option(
    "--forecast",
    is_flag=True,
    help="Forecast the steps after K (--forecast-model) beside persistence, linear trend "
    "and static fit; further FILEs are other runs of the configuration (floor).",
)
@click.option(
    "--forecast-model",
    type=click.Choice(MODELS),
    default=MODELS[0],
    show_default=True,
    help="With --forecast: local-level (the fit steps' measured values filtered by a local "
    "level model, no trend), drift (straight lines through the length quantiles) or "
    "backtest (the local level and the naive rules weighted by their errors in a "
    "rolling-origin backtest inside the fit window).",
)
@click.option(
    "--forecast-steps",
    "horizon",
    type=click.IntRange(min=1),
    default=None,
    help="With --forecast: forecast only the first H steps after K (default: every later step).",
)
@renamed_option("--horizon", "--forecast-steps", "horizon", type=click.IntRange(min=1))
def compare_groups_cmd(
    files,
    fit_steps,
    tau,
    out,
    prompts,
    fit_group_size,
    draws,
    reps,
    seed,
    tokenizer,
    max_response_length,
    length_model,
    within_law,
    fit_window,
    step_window,
    held_out,
    from_step,
    transfer,
    target_metrics,
    forecast,
    forecast_model,
    horizon,
    **fields,
):
    """Fit on the first K steps (the last --fit-window of them when given); on the later
    steps, or on another run (--held-out), compare measured and predicted P(max/median >
    tau) for every G up to the logged one (validation_groups.csv and
    validation_groups.png in --out)."""
    taus = tuple(tau)
    if horizon is not None and not forecast:
        raise BadInput("--forecast-steps: needs --forecast")
    if forecast_model != MODELS[0] and not forecast:
        raise BadInput("--forecast-model: needs --forecast")
    if forecast:
        if fit_steps is None or held_out or transfer or step_window or from_step is not None:
            raise BadInput(
                "--forecast: needs --fit-steps, and takes neither --held-out, --from-step, "
                "--transfer nor --step-window"
            )
        cfg = ForecastConfig(
            fit_steps,
            taus,
            fit_window,
            draws,
            reps,
            seed,
            max_response_length,
            horizon,
            forecast_model,
        )
        _forecast(files, tokenizer, fields, cfg, out)
        return
    check_step_window(length_model, step_window)
    if fit_steps is None and not held_out:
        raise BadInput("--fit-steps: required without --held-out")
    if from_step is not None and not held_out:
        raise BadInput("--from-step: needs --held-out")
    if target_metrics and transfer != "aggregates":
        raise BadInput("--target-metrics: needs --transfer aggregates")
    if transfer and (fit_window or step_window or len(files) > 1):
        raise BadInput("--transfer: one FILE, without --fit-window / --step-window")
    cfg = ValidationConfig(
        fit_steps=fit_steps,
        taus=taus,
        prompts=prompts,
        fit_G=fit_group_size,
        draws=draws,
        reps=reps,
        cap=max_response_length,
        length_model=length_model,
        seed=seed,
        fit_window=fit_window,
        within_law=within_law,
        step_window=step_window,
        from_step=from_step or 0,
        transfer=transfer,
        target_metrics=target_metrics,
    )
    from rolloutlab.analysis.groups.compare import COMMAND, groups_study, write_groups_outputs

    try:
        study = groups_study(files, held_out, field_names(fields), tokenizer, cfg)
    except (ValueError, OSError) as exc:
        raise BadInput(str(exc)) from None
    out_dir = claim(out, COMMAND)
    write_groups_outputs(study, out_dir)
    with pl.Config(tbl_rows=-1, tbl_hide_dataframe_shape=True, float_precision=3):
        click.echo(study.summary())
    if (line := study.target_line()) is not None:
        click.echo(line)
    for line in study.naive_lines():
        click.echo(line)
    for t in (study.trace, study.held_out):
        if t is not None and (uneven := t.group_sizes()) is not None:
            click.echo(f"note: {uneven}; G up to {t.typical_group_size()} (the most common)")
    click.echo(f"wrote {out_dir / 'validation_groups.csv'} (columns {', '.join(COLUMNS)}, ...)")


def _forecast(files, tokenizer, fields, cfg: ForecastConfig, out) -> None:
    """``compare groups --forecast``: the first FILE forecast, the others its floor."""
    from rolloutlab.analysis.groups.compare import COMMAND, forecast_study

    try:
        study = forecast_study(files, field_names(fields), tokenizer, cfg)
    except (ValueError, OSError) as exc:
        raise BadInput(str(exc)) from None
    out_dir = write_table(
        out,
        f"{COMMAND} --forecast",
        "forecast_cells.csv",
        study.cells,
        {"files": list(files), "length_unit": study.length_unit, "config": cfg.__dict__},
    )
    study.makespan.write_csv(out_dir / "forecast_makespan.csv", float_precision=2)
    err, span = study.errors, study.makespan_errors
    ok, n = study.meets
    held = study.makespan["step"]
    click.echo(
        f"steps {held.min()}-{held.max()} forecast ({cfg.model}) from the first "
        f"{cfg.fit_steps}; mean |error| of P(max/median > tau) over {n} cells with measured P "
        "in [0.05, 0.95]:"
    )
    for r in RULES:
        click.echo(f"  {r:<12} {err[r]:.3f}   makespan {span[r]:.1f} tokens")
    if "floor" in err:
        click.echo(f"  {'floor':<12} {err['floor']:.3f}   (the other runs' mean)")
    click.echo(f"cells within max(0.10, floor + 2 SE): {ok} of {n}")
    click.echo(study.verdict())
    click.echo(f"wrote {out_dir / 'forecast_cells.csv'}, {out_dir / 'forecast_makespan.csv'}")
