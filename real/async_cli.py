"""``rolloutlab real async`` and ``rolloutlab real stability`` (registered on the ``real`` group by :func:`register`)."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import click
from rolloutlab.real.checkpoint import CheckpointError
from rolloutlab.real.config import ConfigError, SyncConfig
from rolloutlab.real.rundir import RunDirError
from rolloutlab.sim.trace import TraceError


def _sync_config(opts: dict) -> SyncConfig:
    from rolloutlab.real.cli import _FIELDS, _set

    cfg = SyncConfig()
    for name, dotted in _FIELDS.items():
        cfg = _set(cfg, dotted, opts[name])
    return cfg


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
    pipeline: str,
    stop_on_collapse: bool,
    **opts,
) -> None:
    """Asynchronous GRPO: generator and learner processes, bounded staleness; traces in --out."""
    from rolloutlab.real.async_config import AsyncConfig
    from rolloutlab.real.async_loop import run_async
    from rolloutlab.real.async_workers import GeneratorDied
    from rolloutlab.real.cli import _FIELDS
    from rolloutlab.sim.metrics import pipeline_summary, run_summary

    given = {
        f"sync.{dotted}": opts[name]
        for name, dotted in _FIELDS.items()
        if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
    }
    try:
        acfg = AsyncConfig(
            sync=_sync_config(opts), pipeline=pipeline, stop_on_collapse=stop_on_collapse
        )
        if ctx.get_parameter_source("pipeline") == click.core.ParameterSource.COMMANDLINE:
            given["pipeline"] = pipeline
        rollouts, steps = run_async(
            acfg, out_dir, resume=resume, progress=not quiet, overrides=given
        )
    except (RunDirError, ConfigError, CheckpointError, TraceError, GeneratorDied) as exc:
        raise click.ClickException(str(exc)) from None
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
    }
    click.echo(
        " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items())
    )


def _floats(option: str, text: str) -> list[float]:
    from rolloutlab.sim.stability_cli import _parse_list

    return _parse_list(option, text, float, lambda v: v > 0, "numbers > 0")


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
    import polars as pl
    from rolloutlab.real.async_config import AsyncConfig
    from rolloutlab.real.stability import GridConfig, run_grid
    from rolloutlab.real.stability_fit import eta_max_table, fit_laws, t_collapse_table
    from rolloutlab.real.warmstart import WarmStartConfig
    from rolloutlab.sim.stability import plot_phase_diagram
    from rolloutlab.sim.stability_cli import _parse_list

    S_values = _parse_list("--S", S_text, int, lambda v: v >= 0, "integers >= 0")
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
            tuple(_floats("--lr", lr_text)),
            seeds,
            mode,
            jobs,
            AsyncConfig(sync=sync),
        )
    except (ValueError, ConfigError) as exc:
        raise click.ClickException(str(exc)) from None
    t0 = time.perf_counter()
    df = run_grid(grid, out_dir, progress=True)
    runtime_s = time.perf_counter() - t0
    df.write_csv(out_dir / "stability.csv")
    table = eta_max_table(df)
    fits = fit_laws(df)
    plot_phase_diagram(
        df,
        None,
        steps,
        out_dir / "phase_diagram.png",
        title=f"Real asynchronous GRPO ({mode}:S), T = {steps} steps, {seeds} seeds",
        eta_max=dict(zip(table["S"].to_list(), table["eta_max"].to_list())),
    )
    (out_dir / "fit.json").write_text(json.dumps(fits, indent=2) + "\n")
    (out_dir / "config.json").write_text(
        json.dumps(
            {"grid": dataclasses.asdict(grid), "runtime_s": runtime_s}, indent=2, default=str
        )
        + "\n"
    )
    with pl.Config(
        tbl_rows=-1, float_precision=4, tbl_hide_dataframe_shape=True, tbl_width_chars=200
    ):
        click.echo(table)
        click.echo(t_collapse_table(df))
    for name in ("eta_max_vs_S", "t_collapse_vs_eta"):
        f = fits[name]
        click.echo(
            f"{name}: slope {f['slope']:.3g} ± {f['stderr']:.2g} (bootstrap 16-84%: "
            f"{f['boot_16']:.3g}..{f['boot_84']:.3g}, n={f['n']})"
        )
    click.echo(f"{df.height} runs in {runtime_s:.0f} s -> {out_dir}")


def register(group: click.Group, sync_cmd: click.Command) -> None:
    """Add ``async`` (with every option of ``sync_cmd``) and ``stability`` to ``group``."""
    async_cmd.params[:0] = list(sync_cmd.params)
    group.add_command(async_cmd)
    group.add_command(stability_cmd)
