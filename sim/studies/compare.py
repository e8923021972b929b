"""Run several controllers (and pipelines) on one scenario and one prompt stream, and summarise.

Every controller sees the same seed, hence the same prompts and the same first
samples of each prompt (:mod:`sim.pipelines.sync`); the summary row of each run is
:func:`sim.trace.metrics.run_summary` plus :func:`sim.trace.metrics.pipeline_summary` of its traces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl
from rolloutlab.sim.control.spec import check_spec, parse_controller
from rolloutlab.sim.models.reward_metrics import (
    DYNAMIC_SAMPLING_COLUMNS,
    LEARNING_COLUMNS,
    dynamic_sampling_summary,
    learning_summary,
)
from rolloutlab.sim.pipelines.registry import RunPlan, plan_run, run_plan
from rolloutlab.sim.pipelines.spec import PipelineConfig
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.provenance import describe_rewards, scenario_source, write_config
from rolloutlab.sim.scenario.scenario import Scenario
from rolloutlab.sim.trace import schema as trace
from rolloutlab.sim.trace.metrics import pipeline_summary, run_summary
from rolloutlab.sim.trace.stream import streamed_rollouts
from rolloutlab.sim.trace.turn_metrics import TURN_COLUMNS, turn_summary
from rolloutlab.sim.trace.turns import write_turns

RUN_COLUMNS = (
    "controller",
    "pipeline",
    "steps",
    "wall_clock_s",
    "gen_time_s",
    "slot_idle_frac",
    "straggler_rate",
    "mean_G",
    "rollouts",
    "tokens_per_s",
)
"""The first summary columns: the run, its wall clock and its rollouts."""

ASYNC_COLUMNS = (
    "learner_idle_frac",
    "generator_idle_frac",
    "staleness_mean",
    "staleness_max",
    "dropped",
    "aborted",
)
"""Summary columns that only mean something for asynchronous pipelines."""

SUMMARY_COLUMNS = (
    *RUN_COLUMNS,
    "device_idle_s",
    "train_time_s",
    "sync_time_s",
    "response_tokens",
    *ASYNC_COLUMNS,
    "learner_idle_frac_steady",
    "len_consumed_over_generated",
    "staleness_dispatch_mean",
    "staleness_first_token_mean",
)


def sagc_defaults(scenario: Scenario) -> dict[str, Any]:
    """SAGC keyword defaults a scenario suggests (``tau``, ``delta``), if any."""
    return {k: scenario.defaults[k] for k in ("tau", "delta") if k in scenario.defaults}


COLLAPSE_COLUMNS = ("t_collapse",)
"""Summary column of a run with rewards: the 1-based learner step at which the learning
model collapsed (:attr:`sim.models.learning.LearningModel.t_collapse`), null when it did
not (or the pass rates do not move)."""


def summary_columns(cfg: RunConfig) -> tuple[str, ...]:
    """:data:`SUMMARY_COLUMNS`, plus :data:`sim.models.reward_metrics.LEARNING_COLUMNS` and
    :data:`COLLAPSE_COLUMNS` when the
    run has rewards (without them the summary has timing columns only), and
    :data:`sim.models.reward_metrics.DYNAMIC_SAMPLING_COLUMNS` when it samples dynamically."""
    return (
        SUMMARY_COLUMNS
        + (LEARNING_COLUMNS + COLLAPSE_COLUMNS if cfg.rewards is not None else ())
        + (DYNAMIC_SAMPLING_COLUMNS if cfg.dynamic is not None else ())
    )


def check_target(target: float | None) -> None:
    """``--target-reward``: ``None`` or a number in [0, 1] (an unreachable target is not
    an error: its ``time_to_target_s`` is empty). Raises ValueError naming the option."""
    if target is not None and not (0.0 <= target <= 1.0):
        raise ValueError(f"--target-reward: must be a reward in [0, 1], got {target}")


def check_comparison(
    specs: Sequence[str], pipelines: Sequence[PipelineConfig], dynamic: bool = False
) -> None:
    """The controller specs and pipelines of a comparison, checked together (part of
    :func:`plan_comparison`): every spec parses, specs and pipelines are given and
    distinct, and dynamic sampling (``dynamic``) has no ``oversample:R`` or ``async:S``
    pipeline. Raises ValueError."""
    if not specs:
        raise ValueError("controllers: none given (e.g. static:8,sagc)")
    if len(set(specs)) != len(specs):
        raise ValueError(f"controllers: need distinct specs, got {list(specs)}")
    for spec in specs:
        check_spec(spec)
    if not pipelines:
        raise ValueError("pipelines: none given (e.g. sync,one-step-off)")
    if len(set(pipelines)) != len(pipelines):
        raise ValueError(f"pipelines: need distinct pipelines, got {[p.spec for p in pipelines]}")
    if dynamic and any(p.kind == "oversample" for p in pipelines):
        raise ValueError(
            "--dynamic-sampling over-samples already (--gen-batch-factor); it does not "
            "combine with an oversample:R pipeline"
        )
    if dynamic and any(p.kind == "async" for p in pipelines):
        raise ValueError("--dynamic-sampling does not combine with an async:S pipeline")


@dataclass(frozen=True)
class ComparisonPlan:
    """A comparison's settings, checked together: what :func:`run_comparison` and
    :func:`compare_study` take. Made by :func:`plan_comparison` (the one place they are
    checked); never changed after."""

    specs: tuple[str, ...]
    """Controller specs (``static:G``, ``sagc[:k=v]``, a plug-in), distinct, each parsed once."""
    cfg: RunConfig
    """Run settings shared by every run (steps, prompt batch B, seed, rewards)."""
    runs: tuple[RunPlan, ...]
    """One checked run plan per pipeline (:func:`sim.pipelines.registry.plan_run`): the
    scenario, the pipeline, the engine and its runner."""
    target: float | None = None
    """Target reward of ``time_to_target_s`` (in [0, 1]), or None."""

    @property
    def scenario(self) -> Scenario:
        """The scenario every run simulates."""
        return self.runs[0].scenario

    @property
    def pipelines(self) -> tuple[PipelineConfig, ...]:
        """The pipelines compared, in run order."""
        return tuple(r.pipeline for r in self.runs)

    @property
    def engine(self) -> str:
        """``simpy`` or ``fast``."""
        return self.runs[0].engine


def plan_comparison(
    scenario: Scenario,
    specs: Sequence[str],
    cfg: RunConfig,
    pipelines: Sequence[PipelineConfig] = (PipelineConfig(),),
    engine: str = "simpy",
    target: float | None = None,
) -> ComparisonPlan:
    """Check a comparison before anything runs or is written (the commands call it before
    they create their output folder) and return its :class:`ComparisonPlan`: the specs
    and pipelines (:func:`check_comparison`), the target reward (:func:`check_target`),
    each pipeline against the batch B (:meth:`PipelineConfig.check_batch`) and against
    the scenario and engine (:func:`sim.pipelines.registry.plan_run`: a runner for it, the
    multi-turn block, the step phases). Raises ValueError naming the setting."""
    check_comparison(specs, pipelines, cfg.dynamic is not None)
    check_target(target)
    for pipe in pipelines:
        pipe.check_batch(cfg.prompts)
    runs = tuple(plan_run(scenario, pipe, engine) for pipe in pipelines)
    return ComparisonPlan(tuple(specs), cfg, runs, target)


@dataclass(frozen=True)
class Comparison:
    """What :func:`run_comparison` returns: the summary and the trace tables of every run,
    and what only some runs produce."""

    summary: pl.DataFrame
    """One row per (controller spec, pipeline) (:func:`summary_columns`)."""
    rollouts: pl.DataFrame | pl.LazyFrame
    """Every run's rollout rows (trace schema; lazy when streamed to ``rollout_dir``)."""
    steps: pl.DataFrame
    """Every run's step rows (trace schema)."""
    turns: list[pl.DataFrame] = field(default_factory=list)
    """Multi-turn scenarios: each run's turns table (empty otherwise)."""
    updates: list[pl.DataFrame] = field(default_factory=list)
    """With ``updates_per_batch`` K > 1: each run's optimizer updates
    (:data:`sim.models.update_log.UPDATE_SCHEMA`, K rows per learner step; empty otherwise)."""


def run_comparison(
    plan: ComparisonPlan,
    on_step: Callable[[str, int, int], None] | None = None,
    rollout_dir: Path | None = None,
) -> Comparison:
    """Simulate each controller spec (``static:G``, ``sagc[:k=v]``) of ``plan``
    (:func:`plan_comparison`) under each of its pipelines for ``cfg.steps`` steps; the
    synchronous pipeline on the SimPy engine or the vectorised fast path (``engine="fast"``,
    no KV pressure). Nothing is checked again here.

    Returns a :class:`Comparison`: ``summary`` has one row per (spec, pipeline)
    with :func:`summary_columns` (with rewards: ``informative_frac, final_reward,
    time_to_target_s`` at reward ``target``, :func:`sim.models.reward_metrics.learning_summary`); the trace tables hold every run, ``run_id`` = the spec
    (``spec@pipeline`` when several pipelines are given). Each run is
    :func:`sim.pipelines.registry.simulate` (which runner serves which pipeline: there).
    With a ``multi_turn`` scenario the summary also has
    :data:`sim.trace.turn_metrics.TURN_COLUMNS` and each run's turns table is in
    ``turns``.
    ``rollout_dir`` (an existing folder): each run's rollouts go to
    ``part-NNNN.parquet`` there as it runs, the summaries read them back lazily and
    ``rollouts`` is a lazy scan of the parts in run order (memory: a block of steps, not
    the runs; :func:`sim.trace.stream.merge_parquet` joins them into one file).
    With ``cfg.updates_per_batch`` K > 1, each run's optimizer updates are in ``updates``.
    Raises ValueError as the runs do, and for dynamic sampling that kept no group in any
    step of a run (nothing to summarise).
    """
    scenario, specs, cfg, target = plan.scenario, plan.specs, plan.cfg, plan.target
    pipelines = plan.pipelines
    tau = scenario.run_defaults.tau
    rows: list[dict] = []
    all_rollouts: list = []
    all_steps: list = []
    turns: list[pl.DataFrame] = []
    updates: list[pl.DataFrame] = []
    for run in plan.runs:
        pipe = run.pipeline
        controllers = [parse_controller(s, seed=cfg.seed, **sagc_defaults(scenario)) for s in specs]
        for spec, ctl in zip(specs, controllers):
            run_id = spec if len(pipelines) == 1 else f"{spec}@{pipe.spec}"
            hook = (lambda t, G, _s=run_id: on_step(_s, t, G)) if on_step else None
            run_cfg = replace(cfg, run_id=run_id)
            path = None if rollout_dir is None else rollout_dir / f"part-{len(rows):04d}.parquet"
            result = run_plan(run, ctl, run_cfg, hook, rollout_path=path)
            rollouts, steps = result.rollouts, result.steps
            if cfg.dynamic is not None and not steps["kept_groups"].sum():
                raise ValueError(
                    f"dynamic sampling: no step of {spec} ({pipe.spec}) kept a group: every "
                    f"step aborted after --max-gen-batches {cfg.dynamic.max_gen_batches} rounds "
                    "of groups whose rewards were all equal (pass rates all 0 or 1, or G = 1?)"
                )
            rows.append(
                {
                    "controller": spec,
                    "pipeline": pipe.spec,
                    **run_summary(rollouts, steps, tau),
                    **pipeline_summary(
                        rollouts, steps, pipe.max_staleness, scenario.engine.n_workers
                    ),
                    **(learning_summary(steps, target) if cfg.rewards is not None else {}),
                    "t_collapse": result.log.t_collapse if result.log is not None else None,
                    **(dynamic_sampling_summary(steps) if cfg.dynamic is not None else {}),
                    **(
                        turn_summary(  # (multi-turn runs are not streamed: small)
                            rollouts.collect() if isinstance(rollouts, pl.LazyFrame) else rollouts,
                            result.turns,
                            pipe.kind == "sync",
                        )
                        if result.turns is not None
                        else {}
                    ),
                }
            )
            if result.turns is not None:
                turns.append(result.turns)
            if cfg.updates_per_batch > 1 and result.log is not None:
                updates.append(result.log.table(run_id))
            all_rollouts.append(rollouts)
            all_steps.append(steps)
    mt = TURN_COLUMNS if scenario.multi_turn is not None else ()
    summary = pl.DataFrame(rows, infer_schema_length=None).select(summary_columns(cfg) + mt)
    if cfg.rewards is not None:  # all-empty columns stay Float64 (why: sweeps concatenate)
        summary = summary.with_columns(
            *(pl.col(c).cast(pl.Float64) for c in LEARNING_COLUMNS),
            pl.col("t_collapse").cast(pl.Int64),
        )
    if cfg.dynamic is not None:
        summary = summary.with_columns(pl.col(c).cast(pl.Float64) for c in DYNAMIC_SAMPLING_COLUMNS)
    return Comparison(
        summary, pl.concat(all_rollouts, how="vertical"), pl.concat(all_steps), turns, updates
    )


def summary_notes(summary: pl.DataFrame, cfg: RunConfig, target: float | None) -> list[str]:
    """One line per reason a :func:`run_comparison` summary holds something a reader could
    take for a bug: ``time_to_target_s`` empty in every row because no target reward was
    given, or empty where the target was not reached; dynamic-sampling steps aborted at
    ``cfg.dynamic.max_gen_batches`` (per controller and pipeline, with the count: verl
    would have raised at the first). Empty list when there is nothing to say."""
    notes: list[str] = []
    if cfg.rewards is not None and "time_to_target_s" in summary.columns:
        empty = summary["time_to_target_s"].is_null()
        if target is None:
            notes.append(
                "time_to_target_s is empty: no target reward (give --target-reward R, or "
                "defaults.target_reward in the calibration)"
            )
        elif empty.any():
            notes.append(
                f"time_to_target_s is empty where the target reward {target:g} was not "
                f"reached in {cfg.steps} steps"
            )
    ds = cfg.dynamic
    if ds is not None and "dynamic_sampling_abort_frac" in summary.columns:
        for row in summary.iter_rows(named=True):
            n = round((row["dynamic_sampling_abort_frac"] or 0.0) * cfg.steps)
            if n:
                notes.append(
                    f"dynamic sampling: {row['controller']} ({row['pipeline']}) aborted {n} of "
                    f"{cfg.steps} steps after --max-gen-batches {ds.max_gen_batches} rounds "
                    f"with fewer than {cfg.prompts} informative groups (verl raises at the "
                    "first; here such a step trains on what it kept)"
                )
    return notes


FigureFn = Callable[[pl.LazyFrame, pl.DataFrame, Path, float, float | None], None]
"""Draws a comparison figure: ``(rollouts, steps, path, tau, target)``
(:func:`analysis.figures.plots.comparison_figure`; seaborn lives above ``sim``)."""


def compare_study(
    plan: ComparisonPlan,
    out_dir: Path,
    *,
    on_step: Callable[[str, int, int], None] | None = None,
    figure: FigureFn | None = None,
    record: tuple[dict[str, Any], dict[str, Any]] = ({}, {}),
) -> Comparison:
    """:func:`run_comparison` with every run's rollouts streamed to ``out_dir``, then its
    tables written there: summary.csv, rollouts.parquet, steps.parquet, turns.parquet
    (multi-turn scenarios), updates.parquet (``cfg.updates_per_batch`` K > 1),
    comparison.png (drawn by ``figure``, when given) and config.json (``record``: the keys
    before and after the run's own, e.g. the command's head and a verl config's record).
    A turns, updates or figure file an earlier study left in ``out_dir`` and this one did
    not write is removed (it is not this run's result). Raises as :func:`run_comparison`."""
    scenario, specs, cfg, target = plan.scenario, plan.specs, plan.cfg, plan.target
    tau = scenario.run_defaults.tau
    with streamed_rollouts(out_dir) as parts:
        result = run_comparison(plan, on_step, rollout_dir=parts)
    result.summary.write_csv(out_dir / "summary.csv")
    if result.turns:  # multi-turn rollouts: one row per turn (docs/multi_turn.md)
        write_turns(result.turns, out_dir / "turns.parquet")
    if result.updates:  # K > 1: one row per optimizer update
        pl.concat(result.updates).write_parquet(out_dir / "updates.parquet")
    trace.write_parquet(result.steps, out_dir / "steps.parquet", "steps")
    if figure is not None:
        rollouts = pl.scan_parquet(out_dir / "rollouts.parquet")  # read back lazily
        figure(rollouts, result.steps, out_dir / "comparison.png", tau, target)
    for name, wrote in (("comparison.png", figure is not None), ("turns.parquet", result.turns),
                        ("updates.parquet", result.updates)):  # fmt: skip
        if not wrote:
            (out_dir / name).unlink(missing_ok=True)
    head, tail = record
    write_config(
        out_dir / "config.json",
        {
            **head,
            "run": asdict(replace(cfg, rewards=None, dynamic=None)),
            **describe_rewards(cfg.rewards, cfg.dynamic, target),
            "controllers": list(specs),
            "pipelines": [asdict(p) for p in plan.pipelines],
            "sagc_defaults": sagc_defaults(scenario),
            "tau": tau,
            "engine": asdict(scenario.engine),
            "cost": scenario.cost.to_dict(),
            "calibration": scenario_source(scenario),
            **tail,
        },
    )
    return result
