"""``rolloutlab calibrate groups`` and ``rolloutlab compare groups``: grouped per-sample
traces in (wiring only; the work is in :mod:`calibration.readers.grouped`,
:mod:`calibration.scenarios.groups`, :mod:`calibration.validation.groups`).

Every bad input ends in one line naming the file, line and field, exit code 2, and
nothing written (all reading and fitting happens before the output is claimed).
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import polars as pl

from rolloutlab.calibration.readers.grouped import FIELD_OPTIONS, FieldNames, read_grouped
from rolloutlab.calibration.scenarios.groups import (
    GroupsCalibrationConfig,
    calibrate_groups,
    merge_existing,
)
from rolloutlab.calibration.scenarios.writer import write_json_atomic
from rolloutlab.calibration.validation.forecast import (
    MODELS,
    RULES,
    ForecastConfig,
    cell_errors,
    forecast_runs,
    makespan_errors,
    meets_target,
)
from rolloutlab.calibration.validation.groups import COLUMNS, ValidationConfig, validate_groups
from rolloutlab.calibration.validation.run_spread import with_target
from rolloutlab.calibration.validation.transfer import TRANSFERS
from rolloutlab.commands.options.common import (
    CALIBRATION_OUT,
    BadInput,
    claim,
    cost_from_option,
    renamed_option,
)
from rolloutlab.commands.options.types import POSITIVE_INT, PROMPTS, CommaList, finite
from rolloutlab.sim.models.within_law import LAWS
from rolloutlab.sim.scenario.provenance import write_config
from rolloutlab.sim.scenario.scenario import CalibrationError

LENGTH_MODELS = click.Choice(["lognormal", "empirical"])
WITHIN_LAWS = click.Choice([*LAWS, "auto"])


TAU_OPTION = click.option(
    "--tau",
    default="4",
    show_default=True,
    type=CommaList(finite(1.0, min_open=True)),
    help="Straggler thresholds on max/median length: distinct numbers > 1, comma-separated.",
)
DRAWS_OPTION = click.option(
    "--draws",
    default=200,
    show_default=True,
    type=POSITIVE_INT,
    help="Subsamples per step and G (>= 1).",
)
SUBSAMPLE_SEED_OPTION = click.option(
    "--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Subsample seed."
)


def write_table(out, command: str, name: str, table: pl.DataFrame, config: dict):
    """Claim the output folder ``out`` for ``command`` (``"compare replay"``), write
    ``table`` as ``name`` (CSV) and ``config.json`` (``{"command": command, **config}``
    with provenance); returns the folder."""
    out_dir = claim(out, command)
    table.write_csv(out_dir / name, float_precision=4)
    write_config(out_dir / "config.json", {"command": command, **config})
    return out_dir


PROMPTS_OPTION = click.option(
    "--prompts", type=PROMPTS, default=None, help="B (default: as logged)."
)


def field_options(f):
    """The field-name and tokenizer options of :func:`calibration.readers.grouped.read_grouped`."""
    for name in reversed(FIELD_OPTIONS):
        f = click.option(
            f"--{name.replace('_', '-')}-field",
            name + "_field",
            default=None,
            help=f"Field holding the {name.replace('_', ' ')} (default: common spellings).",
        )(f)
    f = click.option(
        "--tokenizer",
        default=None,
        help="Hugging Face tokenizer (name or path, local files only) for text responses; "
        "without it, or when it is not found locally, lengths are characters.",
    )(f)
    return f


def reader_options(f):
    """FILE... and the options of :func:`calibration.readers.grouped.read_grouped` and the length
    models."""
    f = field_options(f)
    f = click.option(
        "--max-response-length",
        type=click.IntRange(min=1),
        default=None,
        help="Response cap in tokens (default: the largest cap in the data, else the "
        "longest length).",
    )(f)
    f = click.option(
        "--length-model",
        type=LENGTH_MODELS,
        default="lognormal",
        show_default=True,
        help="lognormal: hierarchical fit; empirical: resample whole observed groups.",
    )(f)
    f = click.option(
        "--within-law",
        type=WITHIN_LAWS,
        default="normal",
        show_default=True,
        help="Law of the within-group noise of log length (lognormal model): normal, "
        "gumbel (right-skewed), t (heavy tails, df fitted), or auto (least AIC).",
    )(f)
    f = click.option(
        "--fit-window",
        type=click.IntRange(min=2),
        default=None,
        help="Fit on the last W steps only (of the fit steps): the recent past of a "
        "nonstationary run (default: all).",
    )(f)
    f = click.option(
        "--step-window",
        type=click.IntRange(min=1),
        default=None,
        help="Empirical mode: at simulated step t draw from the W logged steps around t "
        "(replays the run's drift; default: every step pooled).",
    )(f)
    return click.argument("files", nargs=-1, required=True)(f)


def _check_step_window(length_model: str, step_window: int | None) -> None:
    if step_window and length_model != "empirical":
        raise BadInput("--step-window: needs --length-model empirical")


def _check_cap(trace, cap) -> None:
    """A length above ``--max-response-length`` as :class:`BadInput` (file, line, field)."""
    if trace is not None:
        try:
            trace.check_cap(cap)
        except ValueError as exc:
            raise BadInput(str(exc)) from None


def _target_line(table: pl.DataFrame) -> str:
    """One line per model: cells meeting max(0.10, floor + 2 SE), and the worst miss."""
    parts = []
    for (model,), t in table.filter(pl.col("meets").is_not_null()).group_by("model"):
        miss = (t["abs_error"] - t["target"]).max()
        parts.append(
            f"{model}: {int(t['meets'].sum())} of {t.height} cells within max(0.10, floor + 2 SE)"
            + (f", worst by {miss:.3f}" if miss > 0 else "")
        )
    return "target: " + "; ".join(sorted(parts))


def read_files(files, tokenizer, kw):
    """One :class:`calibration.readers.grouped.GroupedTrace` of ``files``, the field options
    popped from ``kw``; a reader error as :class:`BadInput`."""
    names = FieldNames(**{n: kw.pop(n + "_field") for n in FIELD_OPTIONS})
    try:
        return read_grouped(list(files), names, tokenizer)
    except (ValueError, OSError) as exc:
        raise BadInput(str(exc)) from None


def _empirical_summary(lengths: dict) -> str:
    """What empirical mode saved, before the reference fit's numbers."""
    n = len(lengths["groups"])
    if "step_window" in lengths:
        steps = len(set(lengths["group_steps"]))
        return (
            f"empirical lengths, {n} groups of {steps} steps, each step drawing from the "
            f"{lengths['step_window']} logged steps around it; the hierarchical model for "
            "reference (not used): "
        )
    return (
        f"empirical lengths, {n} groups pooled; the hierarchical model for reference (not used): "
    )


def _aics(fit: dict) -> str:
    return ", ".join(f"{law} {aic:.1f}" for law, aic in fit["aic_by_law"].items())


@click.command("groups")
@reader_options
@CALIBRATION_OUT
@cost_from_option("Bundled scenario or calibration file for cost, engine and prompt length.")
@click.option("--name", default="groups", show_default=True, help="Scenario name.")
def calibrate_groups_cmd(
    files,
    out,
    cost_from,
    name,
    tokenizer,
    max_response_length,
    length_model,
    within_law,
    fit_window,
    step_window,
    **fields,
):
    """Fit the hierarchical length model (between-prompt and within-group spread, censored
    at the cap) to grouped per-sample files (JSONL, CSV, parquet, rollouts.parquet)."""
    _check_step_window(length_model, step_window)
    trace = read_files(files, tokenizer, fields)
    _check_cap(trace, max_response_length)
    existing = Path(out).is_file()  # a calibration (CALIBRATION_OUT checked it): merged
    source = click.get_current_context().get_parameter_source("cost_from")
    cost_kept = existing and source != click.core.ParameterSource.COMMANDLINE
    cfg = GroupsCalibrationConfig(
        length_model,
        max_response_length,
        out if cost_kept else cost_from,
        name,
        within_law,
        fit_window,
        step_window,
    )
    try:
        d = calibrate_groups(trace, cfg)
        if existing:
            d, kept, replaced = merge_existing(d, json.loads(Path(out).read_text()), cost_kept)
        write_json_atomic(d, out)
    except (ValueError, CalibrationError, OSError) as exc:
        raise BadInput(str(exc)) from None
    if existing:
        click.echo(
            f"kept from {out}: {', '.join(kept) or 'nothing'}"
            + "".join(f"; {k} replaced by the data's fit" for k in replaced)
        )
    f = d["fit"]["lengths"]
    se = f["se"]
    click.echo(
        f"wrote {out}: "
        + (_empirical_summary(d["lengths"]) if length_model == "empirical" else "")
        + (
            f"fitted on {d['fit']['lengths_fit_groups']} groups, "
            if d["fit"]["lengths_fit_groups"] != "all"
            else f"{f['n_groups']} groups, "
        )
        + f"{f['n_samples']} samples ({f['n_censored']} censored), "
        f"lengths: {trace.length_unit}; "
        f"mu0 {f['mu0']:.3f}±{se['mu0']:.3f}, sigma_prompt {f['sigma_prompt']:.3f}"
        f"±{se['sigma_prompt']:.3f}, sigma_within {f['sigma_within']:.3f}"
        f"±{se['sigma_within']:.3f}, ICC {f['icc']:.3f}±{se['icc']:.3f}"
        + (f", within law {f['within_law']}" if f["within_law"] != "normal" else "")
        + (f" (df {f['within_df']:.2f})" if f["within_law"] == "t" else "")
        + (f" [AIC {_aics(d['fit'])}]" if len(d["fit"]["aic_by_law"]) > 1 else "")
        + "; "
        f"pass rate: {d['pass_rate']['spec'] if 'pass_rate' in d else d['fit']['pass_rate']}"
    )
    if (uneven := trace.group_sizes()) is not None:
        left = d["fit"]["empirical_groups_left_out"]
        click.echo(
            f"note: {uneven}" + (f"; empirical mode left out the {left} smaller" if left else "")
        )


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
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Output folder.")
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
    help="Only the law fitted on FILE that transfers via the measured steps' aggregates.",
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
    "level model, no trend) or drift (straight lines through the length quantiles).",
)
@click.option(
    "--forecast-steps",
    "horizon",
    type=click.IntRange(min=1),
    default=None,
    help="With --forecast: forecast only the first H steps after K (default: every later step).",
)
@renamed_option("--horizon", "--forecast-steps", "horizon", type=click.IntRange(min=1))
def validate_groups_cmd(
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
        _validate_forecast(files, tokenizer, max_response_length, fields, cfg, out)
        return
    _check_step_window(length_model, step_window)
    if fit_steps is None and not held_out:
        raise BadInput("--fit-steps: required without --held-out")
    if from_step is not None and not held_out:
        raise BadInput("--from-step: needs --held-out")
    if target_metrics and transfer != "aggregates":
        raise BadInput("--target-metrics: needs --transfer aggregates")
    if transfer and (fit_window or step_window or len(files) > 1):
        raise BadInput("--transfer: one FILE, without --fit-window / --step-window")
    names, field_names = dict(fields), dict(fields)
    trace = read_files(files, tokenizer, fields)
    other = read_files(held_out, tokenizer, names) if held_out else None
    for t in (trace, other):
        _check_cap(t, max_response_length)
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
    try:
        table = validate_groups(trace, cfg, other)
        if other is not None and len(files) >= 2:  # several runs of one configuration
            runs = [read_files([f], tokenizer, dict(field_names)) for f in files]
            table = with_target(table, runs, other, from_step or 0, draws, seed)
    except (ValueError, OSError) as exc:
        raise BadInput(str(exc)) from None
    out_dir = claim(out, "validate groups")
    table.write_csv(out_dir / "validation_groups.csv", float_precision=4)
    where = (
        f"another run ({', '.join(held_out)}), steps >= {from_step or 0}"
        if held_out
        else f"held-out steps of the same run (fit on {fit_steps})"
    )
    from rolloutlab.analysis.figures.groups_plot import (
        straggler_vs_g_figure,  # seaborn: not for --help
    )

    straggler_vs_g_figure(table, out_dir / "validation_groups.png", f"{where}, B={table['B'][0]}")
    write_config(
        out_dir / "config.json",
        {
            "command": "validate groups",
            "files": list(files),
            "held_out": list(held_out),
            "length_unit": trace.length_unit,
            "config": cfg.__dict__,
        },
    )
    summary = table.group_by("model", "tau", maintain_order=True).agg(
        pl.col("abs_error").max().alias("max_abs_error"),
        pl.col("abs_error").filter(pl.col("G") == pl.col("G").max()).first().alias("at_logged_G"),
    )
    with pl.Config(tbl_rows=-1, tbl_hide_dataframe_shape=True, float_precision=3):
        click.echo(summary)
    if "meets" in table.columns:
        click.echo(_target_line(table))
    for t in (trace, other):
        if t is not None and (uneven := t.group_sizes()) is not None:
            click.echo(f"note: {uneven}; G up to {t.typical_group_size()} (the most common)")
    click.echo(f"wrote {out_dir / 'validation_groups.csv'} (columns {', '.join(COLUMNS)}, ...)")


def _validate_forecast(files, tokenizer, cap, fields, cfg: ForecastConfig, out) -> None:
    """``compare groups --forecast``: the first FILE forecast, the others its floor."""
    runs = [read_files([f], tokenizer, dict(fields)) for f in files]
    for t in runs:
        _check_cap(t, cap)
    try:
        cells, makespan = forecast_runs(runs[0], runs[1:], cfg)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    out_dir = write_table(
        out,
        "validate groups --forecast",
        "forecast_cells.csv",
        cells,
        {"files": list(files), "length_unit": runs[0].length_unit, "config": cfg.__dict__},
    )
    makespan.write_csv(out_dir / "forecast_makespan.csv", float_precision=2)
    err, span = cell_errors(cells), makespan_errors(makespan)
    ok, n = meets_target(cells)
    held = makespan["step"]
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
    click.echo(f"wrote {out_dir / 'forecast_cells.csv'}, {out_dir / 'forecast_makespan.csv'}")
