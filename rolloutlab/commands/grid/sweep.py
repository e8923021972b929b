"""``rolloutlab sweep``: every controller on a grid of B x workers x max_num_seqs x seeds."""

from __future__ import annotations

import functools

import click

from rolloutlab.commands.grid.options import (
    describe_executor,
    finish_grid,
    grid_options,
    prepare_grid,
    run_points,
    start_grid,
)
from rolloutlab.commands.options.common import claim, fail
from rolloutlab.commands.options.scenario import (
    config_head,
    load_run,
    run_options,
    scenario_options,
)
from rolloutlab.commands.options.terminal import echo_table
from rolloutlab.commands.options.types import (
    POSITIVE_INT,
    PROMPTS,
    SEED_COUNT,
    STEPS,
    WORKERS,
    CommaList,
)
from rolloutlab.sim.control.controllers import split_specs
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.provenance import (
    describe,
    describe_rewards,
    scenario_source,
)
from rolloutlab.sim.studies.compare import plan_comparison
from rolloutlab.sim.studies.sweep import grid, printed_means, run_point


def _int_list_option(name: str, metavar: str, what: str, item: click.IntRange = POSITIVE_INT):
    """A ``NAME X[,X...]`` option: distinct integers of ``item``'s range (>= 1;
    :class:`CommaList`; None when not given, meaning the scenario's value); ``what``
    starts its help text."""
    return click.option(
        name,
        metavar=f"{metavar}[,{metavar}...]",
        type=CommaList(item),
        help=f"{what}; distinct integers >= 1 (default: the scenario's).",
    )


def _seed_list(ctx: click.Context, param: click.Parameter, value):
    """``--seeds`` given as a comma list (its old meaning in this command) still works,
    as ``--seed-list``, with a warning on stderr."""
    if value is None or "," not in value:
        return None if value is None else SEED_COUNT.convert(value, param, ctx)
    click.echo(
        "warning: --seeds is now a count (seeds 0..N-1); for explicit seeds use --seed-list",
        err=True,
    )
    return CommaList(click.IntRange(min=0)).convert(value, param, ctx)


@click.command()
@scenario_options
@_int_list_option("--prompts", "B", "Prompt batches B, e.g. 16,64,256", PROMPTS)
@_int_list_option("--workers", "W", "Engine replica counts W, e.g. 1,2,4", WORKERS)
@_int_list_option("--max-num-seqs", "N", "vLLM max_num_seqs per worker, e.g. 256,1024")
@click.option(
    "--seeds",
    metavar="N",
    callback=_seed_list,
    help="Number of seeds: 0..N-1 [default: 3]. Each seed gives every controller the same "
    "prompt stream.",
)
@click.option(
    "--seed-list",
    metavar="S[,S...]",
    type=CommaList(click.IntRange(min=0)),
    help="Explicit seeds instead of --seeds, distinct integers >= 0 (e.g. 3,7).",
)
@click.option("--steps", type=STEPS, help="Learner steps per run (default: scenario's).")
@click.option(
    "--engine",
    type=click.Choice(["fast", "simpy"]),
    default="fast",
    show_default=True,
    help="Vectorised fast path (no KV pressure) or the SimPy engine.",
)
@run_options
@grid_options
def sweep(prompts, workers, max_num_seqs, seeds, seed_list, steps, engine, out, **opts):
    """Run every controller on every grid point of the synchronous pipeline.

    Writes OUT/runs.csv (one row per grid point, seed and controller), means.csv (mean and
    sd over seeds per grid point and controller; `fastest` marks the controller with the
    lowest wall clock at that point, `most_tokens_per_s` the one with the highest
    throughput), sweep.png and config.json, and prints means.csv. The fast path has no KV
    cache model: with --model/--gpu add --no-kv-cache, or use --engine simpy.
    """
    if seeds is not None and seed_list is not None:
        raise click.UsageError("give --seeds N or --seed-list S,S..., not both")
    seeds = seed_list or (list(range(seeds)) if isinstance(seeds, int) else seeds) or [0, 1, 2]
    sc, rewards, dynamic, target_reward = load_run(opts, engine=engine)
    try:
        specs = split_specs(opts["controllers"])
        # every point's checks but its batch B (the sync pipeline takes any B)
        plan_comparison(sc, specs, RunConfig(rewards=rewards, dynamic=dynamic), engine=engine,
                        target=target_reward)  # fmt: skip
        points = grid(
            prompts or [sc.run_defaults.prompts],
            workers or [sc.engine.n_workers],
            max_num_seqs or [sc.engine.max_num_seqs],
            seeds,
        )
    except ValueError as exc:
        fail(exc)
    n_steps = steps or sc.run_defaults.steps
    config = {
        **config_head("sweep", sc, engine, opts),
        "steps": n_steps,
        "dataset_size": opts["dataset_size"],
        "controllers": specs,
        "points": points,
        "engine_before_grid": describe(sc.engine),
        "cost": sc.cost.to_dict(),
        "calibration": scenario_source(sc),
        **describe_rewards(rewards, dynamic, target_reward),
    }
    executor, store = prepare_grid(opts, out, "sweep", config, points)
    claim(out, "sweep")  # after every check, before the runs
    out_dir = start_grid(out, config)
    point_fn = functools.partial(
        run_point,
        scenario=sc,
        specs=specs,
        steps=n_steps,
        engine=engine,
        dataset_size=opts["dataset_size"],
        rewards=rewards,
        dynamic=dynamic,
        target=target_reward,
    )
    run_points(executor, store, point_fn, opts["resume"], "sweeping")
    runs = finish_grid(store)
    from rolloutlab.analysis.figures.plots import write_sweep_outputs  # seaborn: ~1.5 s

    means = write_sweep_outputs(
        runs,
        {**config, **describe_executor(opts)},
        out_dir,
        f"{sc.name}, {n_steps} steps, {engine} engine",
    )
    click.echo(
        f"scenario {sc.name}: {len(points) // len(seeds)} grid points x {len(seeds)} seeds x "
        f"{len(specs)} controllers = {len(points) * len(specs)} runs of {n_steps} steps ({engine} engine)"
    )
    echo_table(printed_means(means), rows=200)
    click.echo(f"wrote {out_dir}/runs.csv, means.csv, sweep.png, config.json")
