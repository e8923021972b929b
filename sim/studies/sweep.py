"""Sweeps: every controller on every point of a grid of prompt batch B x generation
workers x ``max_num_seqs`` x seeds, on one scenario, summarised one row per run.

Each point runs :func:`sim.studies.compare.run_comparison` (the synchronous pipeline, on the
vectorised fast path by default; the SimPy engine on request) and keeps only the summary
row of each controller, so a sweep's memory is that of its largest single run. Every
controller of a point sees the same seed, hence the same prompts and first samples.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence

import polars as pl
from rolloutlab.sim.models.reward_metrics import LEARNING_COLUMNS
from rolloutlab.sim.models.rewards import RewardConfig
from rolloutlab.sim.pipelines.dynamic_sampling import DynamicSampling
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.scenario import Scenario
from rolloutlab.sim.studies.compare import plan_comparison, run_comparison, summary_columns

AXES = ("prompts", "workers", "max_num_seqs", "seed")
"""Grid axes, in the order of the output columns and of the loop (last varies fastest)."""

MEAN_COLUMNS = (
    "wall_clock_s",
    "gen_time_s",
    "slot_idle_frac",
    "straggler_rate",
    "mean_G",
    "tokens_per_s",
)


def grid(
    prompts: Sequence[int],
    workers: Sequence[int],
    max_num_seqs: Sequence[int],
    seeds: Sequence[int],
) -> list[dict[str, int]]:
    """The Cartesian product of the axes, as dicts keyed by :data:`AXES`.

    Raises ValueError for an empty axis, a duplicated value or a value < 1 (seeds may be
    any int)."""
    out = []
    for name, values in zip(
        ("--prompts", "--workers", "--max-num-seqs", "--seeds"),
        (prompts, workers, max_num_seqs, seeds),
    ):
        if not values:
            raise ValueError(f"sweep axis {name}: no values")
        if len(set(values)) != len(values):
            raise ValueError(f"sweep axis {name}: duplicated values {list(values)}")
        if name != "--seeds" and min(values) < 1:
            raise ValueError(f"sweep axis {name}: values must be >= 1, got {list(values)}")
        out.append(values)
    return [dict(zip(AXES, combo)) for combo in itertools.product(*out)]


def run_point(
    point: dict[str, int],
    scenario: Scenario,
    specs: Sequence[str],
    steps: int,
    engine: str = "fast",
    dataset_size: int | None = None,
    rewards: RewardConfig | None = None,
    dynamic: DynamicSampling | None = None,
    target: float | None = None,
) -> pl.DataFrame:
    """Every controller spec at one grid point (a :func:`grid` dict) for ``steps`` steps:
    one row per controller, the :data:`AXES` columns then
    :func:`sim.studies.compare.summary_columns`. Other arguments as in :func:`run_sweep`.
    Raises ValueError as :func:`sim.studies.compare.run_comparison`."""
    sc = dataclasses.replace(
        scenario,
        engine=dataclasses.replace(
            scenario.engine, n_workers=point["workers"], max_num_seqs=point["max_num_seqs"]
        ),
    )
    cfg = RunConfig(
        steps=steps,
        prompts=point["prompts"],
        seed=point["seed"],
        dataset_size=dataset_size,
        run_id="sweep",
        rewards=rewards,
        dynamic=dynamic,
    )
    summary = run_comparison(plan_comparison(sc, specs, cfg, engine=engine, target=target)).summary
    return summary.select(
        *(pl.lit(point[a], dtype=pl.Int64).alias(a) for a in AXES), *summary_columns(cfg)
    )


def run_sweep(
    scenario: Scenario,
    specs: Sequence[str],
    points: Sequence[dict[str, int]],
    steps: int,
    engine: str = "fast",
    dataset_size: int | None = None,
    on_point: Callable[[dict[str, int]], None] | None = None,
    rewards: RewardConfig | None = None,
    dynamic: DynamicSampling | None = None,
    target: float | None = None,
) -> pl.DataFrame:
    """Run every controller spec at every grid point (:func:`grid`) for ``steps`` steps,
    one point after the other (:func:`run_point`; the CLI runs points through an executor).

    ``rewards``, ``dynamic``: as in :class:`sim.pipelines.sync.RunConfig`; ``target``: the
    reward whose ``time_to_target_s`` the summary reports.
    Returns one row per (point, controller): the :data:`AXES` columns, then
    :func:`sim.studies.compare.summary_columns`. ``on_point`` is called after each point.
    Raises ValueError from :func:`sim.studies.compare.run_comparison` (bad spec; KV pressure on
    the fast path).
    """
    frames = []
    for point in points:
        frames.append(
            run_point(point, scenario, specs, steps, engine, dataset_size, rewards, dynamic, target)
        )
        if on_point is not None:
            on_point(point)
    return pl.concat(frames)


def sweep_means(runs: pl.DataFrame) -> pl.DataFrame:
    """Mean of :data:`MEAN_COLUMNS` over seeds per (prompts, workers, max_num_seqs,
    controller), with ``seeds`` (count), ``wall_clock_s_sd`` (sample sd over seeds; null
    for one seed), ``fastest`` (lowest mean wall clock at that point: the fewest rollouts
    usually win it) and ``most_tokens_per_s`` (highest mean throughput: the least idle
    hardware); sorted by the axes, controllers in the order given. Runs with rewards add
    the means of :data:`sim.models.reward_metrics.LEARNING_COLUMNS` (``time_to_target_s``: over
    the seeds that reached the target)."""
    keys = ["prompts", "workers", "max_num_seqs", "controller"]
    learning = [c for c in LEARNING_COLUMNS if c in runs.columns]
    means = runs.group_by(keys, maintain_order=True).agg(
        pl.len().alias("seeds"),
        *(pl.col(c).mean() for c in (*MEAN_COLUMNS, *learning)),
        pl.col("wall_clock_s").std().alias("wall_clock_s_sd"),
    )
    fastest = pl.col("controller").sort_by("wall_clock_s").first().over(keys[:3])
    busiest = pl.col("controller").sort_by("tokens_per_s", descending=True).first().over(keys[:3])
    order = {c: i for i, c in enumerate(dict.fromkeys(runs["controller"].to_list()))}
    return (
        means.with_columns(
            (pl.col("controller") == fastest).alias("fastest"),
            (pl.col("controller") == busiest).alias("most_tokens_per_s"),
            pl.col("controller").replace_strict(order, return_dtype=pl.Int64).alias("_order"),
        )
        .sort(keys[:3] + ["_order"])
        .drop("_order")
    )


PRINTED_COLUMNS = (
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
)
"""The columns of :func:`sweep_means` that ``rolloutlab sweep`` prints (then the learning
columns a run with rewards has)."""


def printed_means(means: pl.DataFrame) -> pl.DataFrame:
    """``means`` (:func:`sweep_means`) cut to :data:`PRINTED_COLUMNS` and the
    :data:`sim.models.reward_metrics.LEARNING_COLUMNS` it has."""
    return means.select(*PRINTED_COLUMNS, *[c for c in LEARNING_COLUMNS if c in means.columns])
