"""``rolloutlab real``: run GRPO on a real (tiny, CPU) model with the simulator's controllers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
from rolloutlab.real.checkpoint import CheckpointError
from rolloutlab.real.config import ConfigError, SyncConfig
from rolloutlab.real.engine_factory import EngineUnavailable, check_engine
from rolloutlab.real.learner import LearnerConfig
from rolloutlab.real.rundir import RunDirError
from rolloutlab.real.warmstart import WarmStartConfig
from rolloutlab.sim.metrics import run_summary
from rolloutlab.sim.trace import TraceError

# option name -> dotted SyncConfig field
_FIELDS = {
    "controller": "controller",
    "steps": "steps",
    "prompts": "prompts",
    "seed": "seed",
    "lr": "learner.lr",
    "capacity": "capacity",
    "engine_mode": "engine_mode",
    "engine": "engine",
    "warm_start_steps": "warm_start.steps",
    "eval_every": "eval_every",
    "checkpoint_every": "checkpoint_every",
    "tau": "tau",
    "eval_size": "eval_size",
    "max_response_tokens": "max_response_tokens",
}


@click.group()
def real() -> None:
    """Real GRPO runs (torch, CPU) driven by the simulator's controllers."""


@real.command()
@click.option("--controller", default="sagc", show_default=True, help="sagc[:k=v,...] or static:G")
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
@click.option("--quiet", is_flag=True, help="no progress bar")
@click.pass_context
def sync(ctx: click.Context, out_dir: Path, resume: bool, quiet: bool, **opts) -> None:
    """Synchronous GRPO: propose G, generate, reward, update, sync, observe; traces in --out."""
    from rolloutlab.real.sync import run_sync  # torch is imported only when a run starts

    given = {
        dotted: opts[name]
        for name, dotted in _FIELDS.items()
        if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
    }
    try:
        cfg = SyncConfig()
        for name, dotted in _FIELDS.items():
            cfg = _set(cfg, dotted, opts[name])
        check_engine(cfg.engine, cfg.engine_mode)  # before the run directory is touched
        rollouts, steps = run_sync(cfg, out_dir, resume=resume, progress=not quiet, overrides=given)
    except (
        RunDirError,
        ConfigError,
        CheckpointError,
        TraceError,
        EngineUnavailable,
        ValueError,
    ) as exc:
        raise click.ClickException(str(exc)) from None
    summary = run_summary(rollouts, steps, tau=cfg.tau)
    click.echo(
        " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items())
    )


def _set(cfg, dotted: str, value):
    head, _, rest = dotted.partition(".")
    if not rest:
        return dataclasses.replace(cfg, **{head: value})
    return dataclasses.replace(cfg, **{head: _set(getattr(cfg, head), rest, value)})


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
    from rolloutlab.real.task import TaskConfig
    from rolloutlab.real.task_figure import plot, solution_lengths, summary

    lengths = solution_lengths(TaskConfig(), problems)
    plot(lengths, out_png)
    for name, row in summary(lengths).items():
        click.echo(f"{name}: " + " ".join(f"{k}={v:g}" for k, v in row.items()))
    click.echo(f"wrote {out_png}")


from rolloutlab.real.async_cli import register  # noqa: E402  (after `sync`: async reuses its options)

register(real, sync)
