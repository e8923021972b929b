"""``rolloutlab calibrate groups``: the hierarchical length model fitted to grouped
per-sample files (wiring only; the work is in :mod:`calibration.readers.grouped` and
:mod:`calibration.scenarios.groups`; the options it shares with ``compare groups`` are
:mod:`rolloutlab.commands.options.grouped`).

Every bad input ends in one line naming the file, line and field, exit code 2, and nothing
written (all reading and fitting happens before the output is claimed).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from rolloutlab.calibration.scenarios.groups import (
    GroupsCalibrationConfig,
    calibrate_groups,
    merge_existing,
)
from rolloutlab.calibration.scenarios.writer import write_json_atomic
from rolloutlab.commands.options.common import CALIBRATION_OUT, BadInput, cost_from_option
from rolloutlab.commands.options.grouped import (
    check_cap,
    check_step_window,
    read_files,
    reader_options,
)
from rolloutlab.sim.scenario.scenario import CalibrationError


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
    check_step_window(length_model, step_window)
    trace = read_files(files, tokenizer, fields)
    check_cap(trace, max_response_length)
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
