"""A verl trainer config in: ``rolloutlab sim --verl-config FILE`` (the option and how it
meets the other options) and ``rolloutlab scenario from-verl FILE`` (a scenario file).

The mapping itself is :mod:`rolloutlab.calibration.scenarios.verl_config`; here the options given on
the command line win over the file, and the mapping is printed.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import click

from rolloutlab.calibration.scenarios.verl_config import (
    VerlConfigError,
    VerlMapping,
    apply_to_calibration,
    load,
    run_settings,
)
from rolloutlab.commands.options.common import CALIBRATION_OUT, fail
from rolloutlab.commands.options.terminal import echo_table
from rolloutlab.sim.models.hardware import MODELS

VERL_BASE = "gsm8k"
"""The scenario whose lengths, cost and pass rates a verl config is applied to when
neither --scenario nor --calibration is given (fitted to verl's own published logs)."""

VERL_OPTION = click.option(
    "--verl-config",
    type=click.Path(dir_okay=False),
    help="A verl trainer config (YAML): its batch, n, lengths, GPUs, TP, model, "
    "pipeline mode, staleness threshold and dynamic sampling set the run; options given "
    f"here win; the scenario defaults to {VERL_BASE} (docs/verl_config.md).",
)
"""``--verl-config FILE`` of ``rolloutlab sim``."""


def _given(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE


def load_mapping(path: str) -> VerlMapping:
    """:func:`calibration.scenarios.verl_config.load`, its error as BadInput (exit 2, one line)."""
    try:
        return load(path)
    except VerlConfigError as exc:
        fail(exc)


def merge_verl(ctx: click.Context, path: str) -> tuple[VerlMapping, dict[str, Any], list[str]]:
    """The verl config ``path`` merged into the command's parameters (``ctx.params``):
    ``(mapping, params, overridden)``, the options set on the command line kept
    (``overridden`` names them as ``--help`` does). ``--model``/``--tp`` are taken from the file only with
    ``--gpu`` (the roofline needs the accelerator, which a verl config does not name).
    Raises BadInput (exit 2) for a file that cannot be mapped, or ``--gpu`` with a model
    the roofline does not know and no ``--model``."""
    m = load_mapping(path)
    params, overridden = dict(ctx.params), []
    for name, value in run_settings(m).items():
        if name in ("model", "tp") and (not params.get("gpu") or _given(ctx, "model")):
            continue
        if _given(ctx, name):
            overridden.append(_flag(ctx, name))
        else:
            params[name] = value
    if params.get("gpu") and not params.get("model"):
        fail(
            VerlConfigError(
                f"{path}: field actor_rollout_ref.model.path: "
                f"{_row(m, 'actor_rollout_ref.model.path')!r} is not a roofline model "
                f"({', '.join(MODELS)}); pass --model with --gpu"
            )
        )
    if not (_given(ctx, "scenario") or _given(ctx, "calibration")):
        params["scenario"] = VERL_BASE
    return m, params, overridden


def _row(m: VerlMapping, field: str) -> Any:
    return next((r.value for r in m.rows if r.field == field), None)


def _flag(ctx: click.Context, name: str) -> str:
    """The option ``--help`` lists for the parameter ``name`` (``controllers``: ``--controller``)."""
    for param in ctx.command.params:
        if param.name == name and isinstance(param, click.Option) and not param.hidden:
            return param.opts[0]
    return "--" + name.replace("_", "-")


def echo_mapping(m: VerlMapping, overridden: Sequence[str] = ()) -> None:
    """Print the mapping (verl field, value, simulator setting, note), the meaningful
    fields the file leaves unset, and every field it ignored."""
    import polars as pl  # why: --help needs no polars

    click.echo(f"verl config {m.path} ({m.mode}):")
    echo_table(
        pl.DataFrame(
            {
                "verl field": [r.field for r in m.rows],
                "value": [str(r.value) for r in m.rows],
                "simulator": [r.setting for r in m.rows],
                "note": [r.note for r in m.rows],
            }
        )
    )
    if overridden:
        click.echo("given on the command line instead: " + ", ".join(overridden))
    if m.missing:
        click.echo("not set in the file (the scenario's value stays): " + ", ".join(m.missing))
    text = f"ignored {len(m.ignored)} field(s), no simulator meaning: " + ", ".join(m.ignored)
    click.echo(textwrap.fill(text, width=100, break_on_hyphens=False))


def updates_source(m: VerlMapping, updates: int, given: bool) -> str:
    """One line saying which optimizer updates per batch K the run uses and where it came
    from: ``--updates-per-batch`` given on the command line (``given``; the file's K
    beside it), the file's ``ceil(B / ppo_mini_batch_size) x ppo_epochs``, or the
    default 1 when the file does not set ``ppo_mini_batch_size``."""
    row = next((r for r in m.rows if r.field.endswith("actor.ppo_mini_batch_size")), None)
    file_k = m.settings.get("updates_per_batch")
    if given:
        from_file = f"the verl config's is {file_k}" if file_k else "the verl config sets none"
        return f"updates per batch K = {updates}: --updates-per-batch ({from_file})"
    if file_k is None or row is None:
        return (
            f"updates per batch K = {updates}: the default (the verl config sets no "
            "actor_rollout_ref.actor.ppo_mini_batch_size)"
        )
    how = row.note.rsplit("; ", 1)[-1]  # fully async: after the B note
    return (
        f"updates per batch K = {updates}: from the verl config, {how} (--updates-per-batch wins)"
    )


def verl_record(m: VerlMapping) -> dict[str, Any]:
    """The mapping for a run's ``config.json``."""
    return {
        "path": m.path,
        "mode": m.mode,
        "settings": m.settings,
        "mapped": [r.field for r in m.rows],
        "missing": m.missing,
        "ignored": m.ignored,
    }


@click.group("scenario")
def scenario() -> None:
    """Write a simulator scenario from another tool's config (verl)."""


@scenario.command("from-verl")
@click.argument("config_file", metavar="FILE", type=click.Path(dir_okay=False))
@click.option(
    "--base",
    default=VERL_BASE,
    show_default=True,
    help="Bundled scenario or calibration JSON whose lengths, cost and pass rates are kept.",
)
@click.option("--name", default=None, help="Scenario name (default: the file's stem).")
@CALIBRATION_OUT
def from_verl(config_file: str, base: str, name: str | None, out: str) -> None:
    """A scenario (calibration JSON) with a verl config's cluster and caps.

    Reads FILE (a verl trainer config), prints the mapping and the fields it ignored, and
    writes OUT: --base's scenario with the file's generation workers, max_num_seqs,
    response and prompt caps, batch and steps. Prints the `rolloutlab sim` options for
    the rest (G, pipeline, placement, dynamic sampling, updates per batch).
    """
    from pathlib import Path

    from rolloutlab.calibration.scenarios.writer import write_json_atomic
    from rolloutlab.sim.scenario.scenario import CalibrationError, load_scenario, scenario_from_dict

    m = load_mapping(config_file)
    try:
        d = apply_to_calibration(load_scenario(base).source, m)
        d["name"] = name or Path(config_file).stem
        scenario_from_dict(d, f"{base} + {config_file}")
        write_json_atomic(d, out)
    except (CalibrationError, ValueError) as exc:
        fail(exc)
    echo_mapping(m)
    opts = run_settings(m)
    flags = ["--dynamic-sampling"] if opts.get("dynamic_sampling") else []
    options = {"controllers": "--controller", "pipeline": "--pipeline", "placement": "--placement",
               "max_gen_batches": "--max-gen-batches", "gen_batch_factor": "--gen-batch-factor",
               "updates_per_batch": "--updates-per-batch"}  # fmt: skip
    flags += [f"{flag} {opts[k]}" for k, flag in options.items() if k in opts]
    click.echo(f"wrote {out} (scenario {d['name']} on {base})")
    click.echo(
        f"run it: rolloutlab sim --calibration {out} {' '.join(flags)} --out runs/{d['name']}"
    )
