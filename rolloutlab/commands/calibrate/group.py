"""``rolloutlab calibrate ...``: fit a scenario to real logs (wiring only; the vLLM
commands are in :mod:`rolloutlab.commands.calibrate.vllm`).

Every bad input ends in one line naming the file and tag/field, exit code 2, and no
output file (outputs are written atomically after all fitting succeeded).
"""

from __future__ import annotations

from pathlib import Path

import click

from rolloutlab.calibration.fits.verl_fit import VerlFitConfig
from rolloutlab.calibration.readers.verl_tb import VerlLogError
from rolloutlab.calibration.scenarios.servegen import LongCotConfig, ServeGenError, build_longcot
from rolloutlab.calibration.scenarios.verl import calibrate_verl
from rolloutlab.calibration.scenarios.writer import write_json_atomic
from rolloutlab.commands.calibrate.groups import calibrate_groups_cmd
from rolloutlab.commands.calibrate.learning import calibrate_learning, calibrate_pass_rate
from rolloutlab.commands.calibrate.turns import calibrate_turns_cmd
from rolloutlab.commands.calibrate.vllm import vllm_compare, vllm_grid, vllm_steps
from rolloutlab.commands.options.common import CALIBRATION_OUT, BadInput, cost_from_option, fail
from rolloutlab.commands.options.types import (
    POSITIVE_INT,
    PROBABILITY,
    PROMPTS,
    STEPS,
    WORKERS,
    finite,
)
from rolloutlab.sim.engine.core import EngineConfig
from rolloutlab.sim.scenario.scenario import CalibrationError

BAD_INPUT = (VerlLogError, ServeGenError, CalibrationError, ValueError, OSError)


def run_dir_args(paths) -> list[str]:
    """The RUN_DIRS arguments that can be verl runs (a folder, or an
    ``events.out.tfevents.*`` file); other files (``SOURCE.md`` of a shell glob like
    ``$R/*``) are skipped with a note on stderr. Raises BadInput when none is left."""
    keep = []
    for p in map(Path, paths):
        if p.is_file() and not p.name.startswith("events.out.tfevents."):
            click.echo(
                f"skipping {p}: not a run folder nor an events.out.tfevents.* file", err=True
            )
            continue
        keep.append(str(p))
    if not keep:
        raise BadInput(f"{', '.join(map(str, paths))}: no run folder among RUN_DIRS")
    return keep


def scenario_defaults(steps, tau, delta) -> dict:
    """The scenario defaults given on the command line (None = not given)."""
    return {k: v for k, v in (("steps", steps), ("tau", tau), ("delta", delta)) if v is not None}


def verl_config(
    *, group_size, max_response_length, gen_workers, max_num_seqs, fit_prefill, replicates, seed
) -> VerlFitConfig:
    """The :class:`VerlFitConfig` of the options of :func:`verl_options` (by name)."""
    return VerlFitConfig(
        group_size=group_size,
        max_response_length=max_response_length,
        engine=EngineConfig(n_workers=gen_workers, max_num_seqs=max_num_seqs),
        fit_prefill=fit_prefill,
        replicates=replicates,
        seed=seed,
    )


def scenario_default_options(f):
    """Options ``--steps``, ``--tau``, ``--delta``: defaults the written scenario carries."""
    opts = [
        click.option("--steps", type=STEPS, default=None, help="Scenario default steps."),
        click.option(
            "--tau",
            type=finite(1.0, min_open=True),
            default=None,
            help="Scenario default SAGC tau.",
        ),
        click.option(
            "--delta",
            type=PROBABILITY,
            default=None,
            help="Scenario default SAGC delta.",
        ),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def verl_options(f):
    """Options describing the logged runs (what the logs do not say)."""
    opts = [
        click.option(
            "--group-size",
            default=5,
            show_default=True,
            type=POSITIVE_INT,
            help="G of the logged runs (rollouts per prompt, >= 1).",
        ),
        click.option(
            "--max-response-length",
            default=1024,
            show_default=True,
            type=POSITIVE_INT,
            help="Response cap of the logged runs (tokens, >= 1).",
        ),
        click.option(
            "--gen-workers",
            default=4,
            show_default=True,
            type=POSITIVE_INT,
            help="Engine replicas of the logged cluster (8 GPUs / rollout TP 2; >= 1).",
        ),
        click.option(
            "--max-num-seqs",
            default=1024,
            show_default=True,
            type=POSITIVE_INT,
            help="vLLM max_num_seqs of the logged runs (verl's default; >= 1).",
        ),
        click.option(
            "--fit-prefill", is_flag=True, help="Also fit prefill_s_per_token (not identified)."
        ),
        click.option(
            "--replicates",
            default=2,
            show_default=True,
            type=POSITIVE_INT,
            help="Length draws per step (>= 1).",
        ),
        click.option(
            "--seed",
            default=0,
            show_default=True,
            type=click.IntRange(min=0),
            help="Seed of the length draws (>= 0).",
        ),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


@click.group()
def calibrate() -> None:
    """Fit a simulator scenario (calibration JSON) to real logs."""


@calibrate.command("verl-tb")
@click.argument("run_dirs", nargs=-1, required=True)
@CALIBRATION_OUT
@click.option("--name", default="verl", show_default=True, help="Scenario name.")
@click.option("--prompts", type=PROMPTS, default=None, help="Simulated B (default: logged B).")
@click.option(
    "--workers",
    type=WORKERS,
    default=None,
    help="Simulated engine replicas (default: logged).",
)
@scenario_default_options
@verl_options
def calibrate_verl_tb(
    run_dirs,
    out,
    name,
    prompts,
    workers,
    steps,
    tau,
    delta,
    **logged,
):
    """Fit lengths and cost to verl TensorBoard runs (RUN_DIR holds events.out.tfevents.*)."""
    cfg = verl_config(**logged)
    try:
        d = calibrate_verl(
            run_dir_args(run_dirs),
            cfg,
            name=name,
            prompts=prompts,
            workers=workers,
            defaults=scenario_defaults(steps, tau, delta),
        )
        write_json_atomic(d, out)
    except BAD_INPUT as exc:
        fail(exc)
    f = d["fit"]
    click.echo(
        f"wrote {out}: {f['steps_used']} steps; decode MAPE {f['decode']['mape']:.3f}, "
        f"learner MAPE {f['learner']['mape']:.3f}, length rms z {f['lengths']['rms_z']:.2f}"
    )
    click.echo(
        "no pass rates (verl's scalars hold none per prompt): `sim` on this scenario has no "
        "reward and no time to target; add them with `rolloutlab calibrate learning "
        f"--verl-tb {run_dirs[0]} --out {out}`"
    )


@calibrate.command("servegen")
@click.argument("folder", type=click.Path())
@CALIBRATION_OUT
@cost_from_option("Calibration file or bundled scenario whose cost and engine are reused.")
@click.option("--name", default="longcot", show_default=True, help="Scenario name.")
@click.option("--prompts", type=PROMPTS, required=True, help="Scenario default B.")
@scenario_default_options
@click.option(
    "--max-response-length",
    default=32768,
    show_default=True,
    type=POSITIVE_INT,
    help="Response cap (tokens, >= 1).",
)
def calibrate_servegen(
    folder, out, cost_from, name, prompts, steps, tau, delta, max_response_length
):
    """Long-reasoning scenario: ServeGen DeepSeek-R1 output lengths + a verl-fitted cost."""
    try:
        d = build_longcot(
            folder,
            cost_from,
            LongCotConfig(max_response_length=max_response_length),
            defaults={"prompts": prompts, **scenario_defaults(steps, tau, delta)},
            name=name,
        )
        write_json_atomic(d, out)
    except BAD_INPUT as exc:
        fail(exc)
    q = d["fit"]["pooled_output_tokens"]
    click.echo(f"wrote {out}: output tokens p50 {q['p50']}, p90 {q['p90']}, p99 {q['p99']}")


calibrate.add_command(vllm_grid)
calibrate.add_command(vllm_compare)
calibrate.add_command(vllm_steps)
calibrate.add_command(calibrate_pass_rate)  # defined in commands/calibrate/learning.py
calibrate.add_command(calibrate_learning)
calibrate.add_command(calibrate_groups_cmd)  # defined in commands/calibrate/groups.py
calibrate.add_command(calibrate_turns_cmd)  # defined in commands/calibrate/turns.py
