"""``rolloutlab real stability``: the real collapse phase diagram, asynchronous GRPO runs
over S x lr x seed (torch is imported only when the command runs)."""

from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path

import click

from rolloutlab.commands.grid.options import (
    describe_executor,
    finish_grid,
    grid_options,
    prepare_grid,
    run_points,
)
from rolloutlab.commands.options.common import check_creatable, fail, out_option, renamed_option
from rolloutlab.commands.options.terminal import echo_table
from rolloutlab.commands.options.types import (
    NON_NEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    PROMPTS,
    SEED_COUNT,
    STEPS,
    CommaList,
)
from rolloutlab.commands.real.detector_options import detector_config, detector_options
from rolloutlab.commands.real.loss_options import loss_options
from rolloutlab.commands.real.run_options import NO_CACHE
from rolloutlab.real.rundir.config import ConfigError, LearnerConfig

REAL_GRID_PARALLEL = 2
"""Real runs at a time when ``--max-parallel`` is not given (each run is two processes)."""


@click.command("stability")
@click.option(
    "--S",
    "S_values",
    default="1,2,4,8",
    show_default=True,
    type=CommaList(NON_NEGATIVE_INT),
    help="S of every run's --pipeline: the sync interval (interval:S, learner steps per "
    "weight sync) or the staleness bound (bounded:S); distinct integers >= 0, comma-separated.",
)
@click.option(
    "--lr",
    "lrs",
    default="1e-4,1e-3,1e-2",
    show_default=True,
    type=CommaList(POSITIVE),
    help="Learning rates: distinct finite numbers > 0, comma-separated.",
)
@click.option(
    "--seeds", default=3, show_default=True, type=SEED_COUNT, help="Seeds per (S, lr): 0..N-1."
)
@click.option(
    "--seed-offset",
    default=0,
    show_default=True,
    type=NON_NEGATIVE_INT,
    help="First seed (>= 0): run seeds K..K+N-1, e.g. --seed-offset 4 --seeds 4 adds seeds 4-7.",
)
@click.option(
    "--steps", default=100, show_default=True, type=STEPS, help="Learner steps T per run."
)
@click.option(
    "--prompts", default=4, show_default=True, type=PROMPTS, help="Prompt batch B (>= 1)."
)
@click.option(
    "--controller",
    default="static:8",
    show_default=True,
    help="Group-size controller spec of every run (static:G, sagc[:k=v,...], lagc[:k=v,...]).",
)
@click.option(
    "--pipeline",
    "mode",
    default="interval",
    show_default=True,
    type=click.Choice(["interval", "bounded"]),
    help="Pipeline of every run: interval:S or bounded:S (S from --S).",
)
@renamed_option("--mode", "--pipeline", "mode", type=click.Choice(["interval", "bounded"]))
@renamed_option("--jobs", "--max-parallel", "max_parallel", type=POSITIVE_INT)
@click.option(
    "--warm-start-steps",
    default=350,
    show_default=True,
    type=NON_NEGATIVE_INT,
    help="Supervised warm-start steps (>= 0).",
)
@loss_options
@detector_options
@NO_CACHE
@out_option("Grid directory (a rerun reuses its finished runs).")
@grid_options
def stability_cmd(
    S_values: list[int],
    lrs: list[float],
    seeds: int,
    seed_offset: int,
    steps: int,
    prompts: int,
    controller: str,
    mode: str,
    warm_start_steps: int,
    clip: bool,
    is_mode: str,
    is_cap: float,
    kl_max: float,
    detector_patience: int,
    release: float,
    entropy_frac: float,
    no_cache: bool,
    out_dir: Path,
    **opts,
) -> None:
    """Real collapse phase diagram: asynchronous GRPO runs over S x lr x seed.

    Writes DIR/stability.csv (the simulator's columns first), DIR/phase_diagram.png,
    DIR/fit.json and DIR/config.json; run directories under DIR/runs/ (a rerun reuses finished ones).
    Runs at a time: --max-parallel, 2 on this machine by default.
    """
    jobs = opts["max_parallel"] or REAL_GRID_PARALLEL
    from rolloutlab.analysis.collapse.stability_fit import finish_real_grid
    from rolloutlab.real.policy.warmstart import default_cache_dir
    from rolloutlab.real.runners.stability import (
        grid_points,
        grid_specs,
        prepare_warm_start,
        run_point,
        stability_grid,
    )

    check_creatable(out_dir)
    detector = {
        "kl_max": kl_max,
        "detector_patience": detector_patience,
        "release": release,
        "entropy_frac": entropy_frac,
    }
    try:
        grid = stability_grid(
            S_values, lrs, seeds, mode, jobs, seed_offset,
            controller=controller, steps=steps, prompts=prompts,
            warm_start_steps=warm_start_steps,
            learner=LearnerConfig(clip=clip, is_mode=is_mode, is_cap=is_cap),
            collapse=detector_config(detector),
        )  # fmt: skip
    except (ValueError, ConfigError) as exc:
        fail(exc)
    spec, earlier = grid_specs(grid)
    executor, store = prepare_grid(
        opts, out_dir, "real stability", spec, grid_points(grid), jobs, [earlier]
    )
    t0 = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    prepare_warm_start(out_dir, grid.base, None if no_cache else default_cache_dir())
    fn = functools.partial(run_point, out=out_dir.resolve(), grid=grid)
    run_points(executor, store, fn, opts["resume"], "real stability")
    df = finish_grid(store)
    runtime_s = time.perf_counter() - t0
    table, t_collapse, fits = finish_real_grid(
        df, dataclasses.asdict(grid), runtime_s, describe_executor(opts), out_dir
    )
    echo_table(table, t_collapse, precision=4)
    for name in ("eta_max_vs_S", "t_collapse_vs_eta"):
        f = fits[name]
        click.echo(
            f"{name}: slope {f['slope']:.3g} ± {f['stderr']:.2g} (bootstrap 16-84%: "
            f"{f['boot_16']:.3g}..{f['boot_84']:.3g}, n={f['n']})"
        )
    click.echo(f"{df.height} runs in {runtime_s:.0f} s -> {out_dir}")
