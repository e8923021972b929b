"""``rolloutlab real``: run GRPO on a real (tiny, CPU) model with the simulator's
controllers: ``sync``, ``async``, ``stability`` and ``task-lengths``.

torch is imported only when a run starts (``rolloutlab --help`` lists this group).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import click

from rolloutlab.commands.common import echo_table, fail, format_summary, parse_list
from rolloutlab.commands.real_run_options import (
    accuracy_summary,
    progress,
    run_options,
    task_spread,
    use_numerics,
)
from rolloutlab.real.config import (
    OPTION_FIELDS,
    ConfigError,
    LearnerConfig,
    SyncConfig,
    WarmStartConfig,
    config_from_options,
)
from rolloutlab.real.engine_factory import EngineUnavailable, check_engine
from rolloutlab.real.rundir import RunDirError
from rolloutlab.sim.metrics import run_summary
from rolloutlab.sim.trace import TraceError


@click.group()
def real() -> None:
    """Real GRPO runs (torch, CPU) driven by the simulator's controllers."""


@real.command()
@click.option(
    "--controller",
    default="sagc",
    show_default=True,
    help="sagc[:k=v,...], lagc[:k=v,...], static:G, file.py:Class[:k=v,...], "
    "module:Class[:k=v,...] or an entry point (docs/controllers.md)",
)
@click.option("--steps", default=SyncConfig.steps, show_default=True, type=int)
@click.option(
    "--prompts", default=SyncConfig.prompts, show_default=True, type=int, help="prompt batch B"
)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--resume", is_flag=True, help="continue the run in --out from its last checkpoint")
@click.option("--lr", default=LearnerConfig.lr, show_default=True, type=float)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option(
    "--capacity", default=SyncConfig.capacity, show_default=True, type=int, help="engine slots"
)
@click.option(
    "--engine-mode",
    default="continuous",
    show_default=True,
    type=click.Choice(["continuous", "static"]),
)
@click.option(
    "--engine",
    default="torch",
    show_default=True,
    type=click.Choice(["torch", "vllm"]),
    help="rollout engine: torch (CPU) or vllm (CUDA GPU, needs the gpu extra)",
)
@click.option("--warm-start-steps", default=WarmStartConfig.steps, show_default=True, type=int)
@click.option("--eval-every", default=SyncConfig.eval_every, show_default=True, type=int)
@click.option(
    "--checkpoint-every", default=SyncConfig.checkpoint_every, show_default=True, type=int
)
@click.option(
    "--eval-size",
    default=SyncConfig.eval_size,
    show_default=True,
    type=int,
    help="held-out problems",
)
@click.option(
    "--max-response-tokens", default=SyncConfig.max_response_tokens, show_default=True, type=int
)
@click.option(
    "--tau", default=SyncConfig.tau, show_default=True, type=float, help="SAGC straggler threshold"
)
@run_options
@click.option("--quiet", is_flag=True, help="no progress bar")
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
    from rolloutlab.real.checkpoint import CheckpointError  # torch: only when a run starts
    from rolloutlab.real.sync import run_sync
    from rolloutlab.real.warmstart import default_cache_dir

    given = {
        dotted: opts[name]
        for name, dotted in OPTION_FIELDS.items()
        if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
    }
    try:
        cfg = config_from_options(opts)
        check_engine(cfg.engine, cfg.engine_mode)  # before the run directory is touched
        rollouts, steps = run_sync(
            cfg,
            out_dir,
            resume=resume,
            progress=not quiet,
            overrides=given,
            cache_dir=None if no_cache else default_cache_dir(),
        )
    except (
        RunDirError,
        ConfigError,
        CheckpointError,
        TraceError,
        EngineUnavailable,
        ValueError,
    ) as exc:
        fail(exc)
    summary = {
        **run_summary(rollouts, steps, tau=cfg.tau),
        **accuracy_summary(out_dir, target_accuracy),
    }
    click.echo(format_summary(summary))


@real.command("task-lengths")
@click.option(
    "--out",
    "out_png",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="PNG to write (the committed one: docs/figures/real_task_lengths.png)",
)
@click.option("--problems", default=100_000, show_default=True, type=int)
def task_lengths(out_png: Path, problems: int) -> None:
    """Plot the digit-chain task's solution-length distribution and print its quantiles."""
    from rolloutlab.analysis.plots import task_lengths_figure
    from rolloutlab.real.task import TaskConfig
    from rolloutlab.real.task_lengths import solution_lengths, summary

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
    "--stop-on-collapse", is_flag=True, help="end the run at the first collapse (real/collapse.py)"
)
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
    from rolloutlab.real.async_config import AsyncConfig
    from rolloutlab.real.async_loop import run_async
    from rolloutlab.real.async_workers import GeneratorDied
    from rolloutlab.real.checkpoint import CheckpointError
    from rolloutlab.real.warmstart import default_cache_dir
    from rolloutlab.sim.metrics import pipeline_summary, run_summary

    given = {
        f"sync.{dotted}": opts[name]
        for name, dotted in OPTION_FIELDS.items()
        if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
    }
    try:
        acfg = AsyncConfig(
            sync=config_from_options(opts), pipeline=pipeline, stop_on_collapse=stop_on_collapse
        )
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
    except (RunDirError, ConfigError, CheckpointError, TraceError, GeneratorDied) as exc:
        fail(exc)
    stored = json.loads((out_dir / "config.json").read_text())["config"]
    summary = {
        **run_summary(rollouts, steps, tau=acfg.sync.tau),
        **pipeline_summary(
            rollouts, steps, AsyncConfig.from_dict(stored).pipeline_config.max_staleness
        ),
        **{
            k: v
            for k, v in json.loads((out_dir / "collapse.json").read_text()).items()
            if k in ("collapsed", "t_collapse", "failure")
        },
        **accuracy_summary(out_dir, target_accuracy),
    }
    click.echo(format_summary(summary))


@click.command("stability")
@click.option(
    "--S",
    "S_text",
    default="1,2,4,8",
    show_default=True,
    help="staleness / sync intervals S, comma-separated",
)
@click.option(
    "--lr",
    "lr_text",
    default="1e-4,1e-3,1e-2",
    show_default=True,
    help="learning rates, comma-separated",
)
@click.option("--seeds", default=3, show_default=True, type=int, help="seeds per (S, lr)")
@click.option("--steps", default=100, show_default=True, type=int, help="learner steps T per run")
@click.option("--prompts", default=4, show_default=True, type=int, help="prompt batch B")
@click.option("--controller", default="static:8", show_default=True)
@click.option(
    "--mode", default="interval", show_default=True, type=click.Choice(["interval", "bounded"])
)
@click.option("--jobs", default=2, show_default=True, type=int, help="runs at a time")
@click.option("--warm-start-steps", default=350, show_default=True, type=int)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path))
def stability_cmd(
    S_text: str,
    lr_text: str,
    seeds: int,
    steps: int,
    prompts: int,
    controller: str,
    mode: str,
    jobs: int,
    warm_start_steps: int,
    out_dir: Path,
) -> None:
    """Real collapse phase diagram: asynchronous GRPO runs over S x lr x seed.

    Writes DIR/stability.csv (the simulator's columns first), DIR/phase_diagram.png,
    DIR/fit.json and DIR/config.json; run directories under DIR/runs/ (a rerun reuses finished ones).
    """
    from rolloutlab.analysis.stability_fit import t_collapse_table, write_real_grid
    from rolloutlab.real.async_config import AsyncConfig
    from rolloutlab.real.stability import GridConfig, run_grid

    S_values = parse_list("--S", S_text, int, lambda v: v >= 0, "integers >= 0")
    try:
        sync = SyncConfig(
            controller=controller,
            steps=steps,
            prompts=prompts,
            eval_every=steps,
            eval_size=64,
            checkpoint_every=steps,
            warm_start=WarmStartConfig(steps=warm_start_steps),
        )
        grid = GridConfig(
            tuple(S_values),
            tuple(parse_list("--lr", lr_text, float, lambda v: v > 0, "numbers > 0")),
            seeds,
            mode,
            jobs,
            AsyncConfig(sync=sync),
        )
    except (ValueError, ConfigError) as exc:
        fail(exc)
    t0 = time.perf_counter()
    df = run_grid(grid, out_dir, progress=True)
    runtime_s = time.perf_counter() - t0
    table, fits = write_real_grid(
        df,
        steps,
        {"grid": dataclasses.asdict(grid), "runtime_s": runtime_s},
        out_dir,
        f"Real asynchronous GRPO ({mode}:S), T = {steps} steps, {seeds} seeds",
    )
    echo_table(table, t_collapse_table(df), cols=None, precision=4, dtypes=True)
    for name in ("eta_max_vs_S", "t_collapse_vs_eta"):
        f = fits[name]
        click.echo(
            f"{name}: slope {f['slope']:.3g} ± {f['stderr']:.2g} (bootstrap 16-84%: "
            f"{f['boot_16']:.3g}..{f['boot_84']:.3g}, n={f['n']})"
        )
    click.echo(f"{df.height} runs in {runtime_s:.0f} s -> {out_dir}")


async_cmd.params[:0] = list(sync.params)  # `real async` takes every option of `real sync` first
real.add_command(async_cmd)
real.add_command(stability_cmd)
real.add_command(task_spread)
real.add_command(progress)
