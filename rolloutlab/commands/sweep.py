"""``rolloutlab sweep``: every controller on a grid of B x workers x max_num_seqs x seeds."""

from __future__ import annotations

from pathlib import Path

import click
from tqdm import tqdm

from rolloutlab.analysis.plots import sweep_figure
from rolloutlab.commands.common import claim, echo_table, fail, int_list
from rolloutlab.commands.learning_options import (
    describe_rewards,
    learning_options,
    rewards_from_options,
)
from rolloutlab.commands.scenario import load_for, scenario_options
from rolloutlab.sim.compare import check_comparison
from rolloutlab.sim.controllers import split_specs
from rolloutlab.sim.pipeline_spec import PipelineConfig
from rolloutlab.sim.provenance import describe, scenario_source, write_config
from rolloutlab.sim.reward_metrics import LEARNING_COLUMNS
from rolloutlab.sim.sweep import grid, run_sweep, sweep_means


@click.command()
@scenario_options
@click.option(
    "--prompts",
    metavar="B[,B...]",
    callback=int_list("--prompts"),
    help="Prompt batches B, e.g. 16,64,256 (default: the scenario's).",
)
@click.option(
    "--workers",
    metavar="W[,W...]",
    callback=int_list("--workers"),
    help="Generation worker counts, e.g. 1,2,4 (default: the scenario's).",
)
@click.option(
    "--max-num-seqs",
    metavar="N[,N...]",
    callback=int_list("--max-num-seqs"),
    help="vLLM max_num_seqs per worker, e.g. 256,1024 (default: the scenario's).",
)
@click.option(
    "--seeds",
    metavar="S[,S...]",
    default="0,1,2",
    show_default=True,
    callback=int_list("--seeds"),
    help="Seeds; each gives every controller the same prompt stream.",
)
@click.option(
    "--steps", type=click.IntRange(min=1), help="Learner steps per run (default: scenario's)."
)
@click.option(
    "--engine",
    type=click.Choice(["fast", "simpy"]),
    default="fast",
    show_default=True,
    help="Vectorised fast path (no KV pressure) or the SimPy engine.",
)
@learning_options
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Output directory.")
def sweep(
    calibration,
    scenario,
    controllers,
    model,
    gpu,
    tp,
    kv_cache,
    drift,
    dataset_size,
    prompts,
    workers,
    max_num_seqs,
    seeds,
    steps,
    engine,
    pass_rate,
    dynamic_sampling,
    gen_batch_factor,
    max_gen_batches,
    refill,
    target_reward,
    out,
):
    """Run every controller on every grid point of the synchronous pipeline.

    Writes OUT/runs.csv (one row per grid point, seed and controller), means.csv (mean and
    sd over seeds per grid point and controller; `fastest` marks the controller with the
    lowest wall clock at that point, `most_tokens_per_s` the one with the highest
    throughput), sweep.png and config.json, and prints means.csv. The fast path has no KV
    cache model: with --model/--gpu add --no-kv-cache, or use --engine simpy.
    """
    sc = load_for(
        calibration,
        scenario,
        engine=engine,
        model=model,
        gpu=gpu,
        tp=tp,
        kv_cache=kv_cache,
        drift=drift,
    )
    rewards, dynamic, target_reward = rewards_from_options(
        sc, pass_rate, dynamic_sampling, gen_batch_factor, max_gen_batches, refill, target_reward
    )
    try:
        specs = split_specs(controllers)
        check_comparison(specs, [PipelineConfig()], engine, dynamic is not None)
        points = grid(
            prompts or [int(sc.defaults.get("prompts", 64))],
            workers or [sc.engine.n_workers],
            max_num_seqs or [sc.engine.max_num_seqs],
            seeds,
        )
    except ValueError as exc:
        fail(exc)
    claim(out, "sweep")  # after every check, before the runs
    n_steps = steps or int(sc.defaults.get("steps", 300))
    bar = tqdm(total=len(points), desc="sweeping", unit="point", disable=None, leave=False)
    try:
        runs = run_sweep(
            sc,
            specs,
            points,
            n_steps,
            engine=engine,
            dataset_size=dataset_size,
            on_point=lambda p: bar.update(),
            rewards=rewards,
            dynamic=dynamic,
            target=target_reward,
        )
    except (ValueError, RuntimeError) as exc:
        fail(exc)
    finally:
        bar.close()
    means = sweep_means(runs)
    out_dir = Path(out)
    runs.write_csv(out_dir / "runs.csv")
    means.write_csv(out_dir / "means.csv")
    sweep_figure(runs, out_dir / "sweep.png", f"{sc.name}, {n_steps} steps, {engine} engine")
    write_config(
        out_dir / "config.json",
        {
            "command": "sweep",
            "scenario": sc.name,
            "engine_impl": engine,
            "model": model,
            "gpu": gpu,
            "tp": tp,
            "drift": drift,
            "lengths": describe(sc.lengths),
            "steps": n_steps,
            "dataset_size": dataset_size,
            "controllers": specs,
            "points": points,
            "engine_before_grid": describe(sc.engine),
            "cost": sc.cost.to_dict(),
            "calibration": scenario_source(sc),
            **describe_rewards(rewards, dynamic, target_reward),
        },
    )
    click.echo(
        f"scenario {sc.name}: {len(points) // len(seeds)} grid points x {len(seeds)} seeds x "
        f"{len(specs)} controllers = {len(points) * len(specs)} runs of {n_steps} steps ({engine} engine)"
    )
    echo_table(
        means.select(
            "prompts",
            "workers",
            "max_num_seqs",
            "controller",
            "seeds",
            "wall_clock_s",
            "wall_clock_s_sd",
            "straggler_rate",
            "slot_idle_frac",
            "mean_G",
            "tokens_per_s",
            "fastest",
            "most_tokens_per_s",
            *[c for c in LEARNING_COLUMNS if c in means.columns],
        ),
        rows=200,
        cols=20,
    )
    click.echo(f"wrote {out_dir}/runs.csv, means.csv, sweep.png, config.json")
