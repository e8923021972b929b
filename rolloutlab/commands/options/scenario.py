"""Click options and scenario loading shared by ``rolloutlab sim`` and ``rolloutlab sweep``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from rolloutlab.calibration.scenarios.verl_config import VerlMapping, apply_to_calibration
from rolloutlab.commands.options.common import fail, out_option, renamed_option
from rolloutlab.commands.options.learning import learning_options, rewards_from_options
from rolloutlab.sim.models.drift import DRIFTS
from rolloutlab.sim.models.hardware import GPUS, MODELS
from rolloutlab.sim.scenario.bundled import DEFAULT_SCENARIO, bundled_scenarios

if TYPE_CHECKING:
    from rolloutlab.sim.models.rewards import RewardConfig
    from rolloutlab.sim.pipelines.dynamic_sampling import DynamicSampling
    from rolloutlab.sim.scenario.scenario import Scenario

OPTIONS = [
    click.option(
        "--calibration",
        "calibration",
        type=click.Path(dir_okay=False),
        help="Calibration JSON (from `rolloutlab calibrate`); overrides --scenario.",
    ),
    click.option(
        "--scenario",
        default=DEFAULT_SCENARIO,
        show_default=True,
        help=f"Bundled scenario: {', '.join(bundled_scenarios()) or '(none)'}.",
    ),
    click.option(
        "--controller",
        "controllers",
        default="static:4,static:8,static:16,sagc",
        show_default=True,
        help="Comma-separated controller specs: static:G, sagc[:key=value,...], "
        "lagc[:key=value,...], path/to/file.py:Class[:key=value,...], module:Class[:...] "
        "or an installed entry point (e.g. static:4,sagc:tau=15,delta=0.2,lagc; "
        "docs/controllers.md).",
    ),
    click.option(
        "--model",
        type=click.Choice(sorted(MODELS)),
        help="Roofline cost of this model "
        "(replaces the scenario's decode/prefill coefficients; with --gpu).",
    ),
    click.option("--gpu", type=click.Choice(sorted(GPUS)), help="Accelerator for --model."),
    click.option(
        "--tp",
        type=click.IntRange(min=1),
        default=1,
        show_default=True,
        help="Tensor-parallel GPUs per worker (with --model/--gpu).",
    ),
    click.option(
        "--kv-cache/--no-kv-cache",
        default=None,
        help="With --model/--gpu: KV blocks from GPU memory (preemption); default on with "
        "--engine simpy; --engine fast has no KV model and needs --no-kv-cache.",
    ),
    click.option(
        "--drift",
        type=click.Choice(sorted(DRIFTS)),
        help="Replace the length model by the "
        "ServeGen long-reasoning model with this drift over steps.",
    ),
    click.option(
        "--dataset-size",
        type=click.IntRange(min=1),
        help="Prompts in the dataset "
        "(ids recur every epoch; default: fresh prompts). A recurring prompt keeps its "
        "difficulty under lognormal and --drift lengths and its observed group under "
        "grouped empirical lengths; i.i.d. empirical lengths (longcot) have none to keep.",
    ),
    # last: tail-study picks the options it takes by position
    renamed_option("--controllers", "--controller", "controllers"),
]


def scenario_options(command):
    """Decorate a click command with the shared scenario options (in help order)."""
    for option in reversed(OPTIONS):
        command = option(command)
    return command


def run_options(command):
    """Decorate a click command with the options that end ``rolloutlab sim`` and
    ``rolloutlab sweep``: the reward options (:func:`learning_options`), then ``--out``."""
    command = out_option("Output directory.", dest="out", as_path=False)(command)
    return learning_options(command)


def load_for(
    calibration: str | None, scenario: str, verl: VerlMapping | None = None, **overrides: Any
) -> Scenario:
    """Load the calibration file (else the bundled ``scenario``), give it the cluster and
    caps of the verl config ``verl`` (:func:`calibration.scenarios.verl_config.apply_to_calibration`)
    and apply ``overrides``, the keywords of :func:`sim.scenario.overrides.apply_overrides`
    (``engine``, ``workers``, ``model``, ``gpu``, ``tp``, ``kv_cache``, ``drift``). Raises
    :class:`~rolloutlab.commands.options.common.BadInput` (exit 2) with the loader's or the
    override's one-line message."""
    # why here: the scenario's models import numpy, which --help does not need
    from rolloutlab.sim.scenario.overrides import apply_overrides
    from rolloutlab.sim.scenario.scenario import (
        CalibrationError,
        read_calibration,
        scenario_from_dict,
    )

    try:
        data, path = read_calibration(calibration or scenario)
        if verl is not None:  # the file's JSON takes the verl settings before the one parse
            data = apply_to_calibration(data, verl)
            path = f"{calibration or scenario} + {verl.path}"
        return apply_overrides(scenario_from_dict(data, path), **overrides)
    except (CalibrationError, ValueError) as exc:
        fail(exc)


def load_run(
    opts: dict[str, Any],
    *,
    engine: str,
    workers: int | None = None,
    verl: VerlMapping | None = None,
) -> tuple[Scenario, RewardConfig | None, DynamicSampling | None, float | None]:
    """The scenario (:func:`load_for`, with the verl config ``verl``) and the run's reward settings
    (:func:`rewards_from_options`) from the keyword arguments click passes for
    :func:`scenario_options` and :func:`run_options` (``opts``; other keys are ignored).

    Returns ``(scenario, rewards, dynamic, target_reward)``. Raises
    :class:`~rolloutlab.commands.options.common.BadInput` or :class:`click.UsageError` (exit 2, one
    line, nothing written) as those two do.
    """
    overrides = {k: opts[k] for k in ("model", "gpu", "tp", "kv_cache", "drift")}
    sc = load_for(
        opts["calibration"], opts["scenario"], verl, engine=engine, workers=workers, **overrides
    )
    rewards = rewards_from_options(
        sc,
        opts["pass_rate"],
        opts["dynamic_sampling"],
        opts["gen_batch_factor"],
        opts["max_gen_batches"],
        opts["refill"],
        opts["target_reward"],
    )
    return (sc, *rewards)


def config_head(command: str, sc: Scenario, engine: str, opts: dict[str, Any]) -> dict[str, Any]:
    """The first keys of a sim or sweep ``config.json``: the command, scenario name, engine
    implementation, the ``--model --gpu --tp --drift`` overrides (from ``opts``, as in
    :func:`load_run`) and a description of the scenario's length model."""
    from rolloutlab.sim.scenario.provenance import describe

    return {
        "command": command,
        "scenario": sc.name,
        "engine_impl": engine,
        **{k: opts[k] for k in ("model", "gpu", "tp", "drift")},
        "lengths": describe(sc.lengths),
    }


WITHOUT_STEP_PHASES = click.option(
    "--without-step-phases",
    is_flag=True,
    help="Leave a calibration's reward and periodic step phases (docs/step_phases.md) out "
    "of every run: each step is generation, learner and weight sync only, so the "
    "asynchronous pipelines can be compared with the synchronous one; those seconds are "
    "in no run's time.",
)
"""``--without-step-phases`` of ``rolloutlab sim`` and ``advise``: the way past the
synchronous-only refusal of a scenario with a ``step_phases`` block."""


def without_step_phases(sc: Scenario, drop: bool) -> Scenario:
    """``sc`` without its ``step_phases`` block when ``drop`` (``--without-step-phases``),
    saying so in one line; ``sc`` itself otherwise."""
    if not drop:
        return sc
    if sc.step_phases is None:
        click.echo(f"--without-step-phases: scenario {sc.name} has no step phases to leave out")
        return sc
    import dataclasses

    click.echo(
        f"--without-step-phases: scenario {sc.name}'s reward and periodic step phases are left "
        "out of every run (a step is generation, learner and weight sync only)"
    )
    return dataclasses.replace(sc, step_phases=None)
