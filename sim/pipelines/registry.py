"""The one pipeline interface: a registry from (engine, pipeline kind) to the runner that
simulates it, and one result type.

Every runner takes ``(scenario, controller, cfg, pipeline, on_step)`` and returns a
:class:`PipelineResult`. Which runner serves which kind:

- ``simpy`` engine, ``sync``: :func:`sim.pipelines.sync.run_sync` (the plain synchronous
  step loop on the SimPy engine);
- ``simpy`` engine, ``async``: :func:`sim.pipelines.async_stream.run_stream` (group-at-a-time
  launcher and a bounded rollout queue);
- ``simpy`` engine, every other kind of :data:`sim.pipelines.spec.KINDS`:
  :func:`sim.pipelines.async_pipeline.run_pipeline` (batch dispatch, bounded staleness);
- ``fast`` engine, ``sync``: :func:`sim.pipelines.sync_fast.run_sync_fast` (vectorised, no
  KV pressure; the same tables as ``run_sync``, times equal to float rounding).

A run's settings are checked once, by :func:`plan_run`, into a frozen :class:`RunPlan`
that :func:`run_plan` runs without checking again; :func:`simulate` is the two in one.
Studies (:mod:`sim.studies`) call these and never choose a runner themselves.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace

import polars as pl
from rolloutlab.sim.control.contract import Controller
from rolloutlab.sim.models.update_log import UpdateLog
from rolloutlab.sim.pipelines.async_ledger import Ledger
from rolloutlab.sim.pipelines.async_pipeline import run_pipeline
from rolloutlab.sim.pipelines.async_stream import run_stream
from rolloutlab.sim.pipelines.multi_turn import check_multi_turn
from rolloutlab.sim.pipelines.spec import KINDS, PipelineConfig
from rolloutlab.sim.pipelines.sync import RunConfig, run_sync
from rolloutlab.sim.pipelines.sync_fast import run_sync_fast
from rolloutlab.sim.scenario.scenario import Scenario
from rolloutlab.sim.trace.stream import RolloutSink

OnStep = Callable[[int, int], None] | None
"""``on_step(step, G)`` after each learner step (progress bars), or None."""


@dataclass(frozen=True)
class PipelineResult:
    """What one simulated run produced (trace schema, :mod:`sim.trace.schema`)."""

    rollouts: pl.DataFrame | pl.LazyFrame
    """One row per rollout: consumed ones, and dropped or aborted ones
    (``finish_reason == "abort"``) where the pipeline has them; a lazy scan of the file
    when :func:`simulate` was given a ``rollout_path``."""
    steps: pl.DataFrame
    """One row per learner step."""
    ledger: Ledger | None = None
    """The asynchronous pipelines' accounting of every rollout generated, including those
    still buffered or generating at the end; None for the synchronous runners."""
    turns: pl.DataFrame | None = None
    """One row per model turn (:mod:`sim.trace.turns`) of a multi-turn run, else None."""
    log: UpdateLog | None = None
    """The learning model's optimizer updates and collapse step
    (:class:`sim.models.update_log.UpdateLog`); set by :func:`simulate`."""


Runner = Callable[..., PipelineResult]
"""``runner(scenario, controller, cfg, pipeline, on_step, log=None) -> PipelineResult``
(``log``: an :class:`~sim.models.update_log.UpdateLog` the run's learner appends to)."""


def _sync(scenario, controller, cfg, pipeline, on_step, log=None) -> PipelineResult:
    turns: list[pl.DataFrame] = []
    rollouts, steps = run_sync(scenario, controller, cfg, on_step=on_step, turns=turns, log=log)
    if scenario.multi_turn is None:
        return PipelineResult(rollouts, steps)
    return PipelineResult(rollouts, steps, turns=pl.concat(turns) if turns else None)


def _sync_fast(scenario, controller, cfg, pipeline, on_step, log=None) -> PipelineResult:
    rollouts, steps = run_sync_fast(scenario, controller, cfg, on_step=on_step, log=log)
    assert rollouts is not None  # (None only when the caller streams them to a file)
    return PipelineResult(rollouts, steps)


def _batches(scenario, controller, cfg, pipeline, on_step, log=None) -> PipelineResult:
    turns: list[pl.DataFrame] = []
    result = run_pipeline(scenario, controller, cfg, pipeline, on_step, turns, log)
    return PipelineResult(*result, turns=turns[0] if turns else None)


def _stream(scenario, controller, cfg, pipeline, on_step, log=None) -> PipelineResult:
    return PipelineResult(*run_stream(scenario, controller, cfg, pipeline, on_step, log))


RUNNERS: dict[str, dict[str, Runner]] = {
    "simpy": {
        **{kind: _batches for kind in KINDS},
        "sync": _sync,
        "async": _stream,
    },
    "fast": {"sync": _sync_fast},
}
"""Engine name -> pipeline kind -> runner (module docstring)."""


def runner_for(pipeline: PipelineConfig, engine: str = "simpy") -> Runner:
    """The runner of ``pipeline`` on ``engine`` (``simpy`` or ``fast``).

    Raises: ValueError naming the engines, or the kinds the engine runs, when there is none.
    """
    if engine not in RUNNERS:
        raise ValueError(f"engine: must be one of {sorted(RUNNERS)}, got {engine!r}")
    kinds = RUNNERS[engine]
    if pipeline.kind not in kinds:
        raise ValueError(
            f"--engine {engine} runs the {', '.join(sorted(kinds))} pipeline only; "
            f"{pipeline.spec} needs --engine simpy"
        )
    return kinds[pipeline.kind]


def check_step_phases(scenario: Scenario, pipeline: PipelineConfig) -> None:
    """Raise ValueError when ``scenario`` has step phases (reward, periodic) and
    ``pipeline`` is not the synchronous one: only that pipeline prices them."""
    if scenario.step_phases is not None and pipeline.kind != "sync":
        raise ValueError(
            f"{scenario.name}: the step_phases block (reward and periodic phases) is priced "
            f"by the synchronous pipeline only: where {pipeline.spec} would put them (beside "
            "generation or on the learner) is not in a synchronous run's log "
            "(docs/step_phases.md, 'Asynchronous pipelines'); use --pipeline sync, or "
            "--without-step-phases to compare pipelines with those phases left out of every one"
        )


@dataclass(frozen=True)
class RunPlan:
    """A run's scenario, pipeline and engine, checked together, with the runner that
    serves them: what :func:`run_plan` takes. Made by :func:`plan_run` (the one place these
    settings are checked); never changed after."""

    scenario: Scenario
    """The scenario the run simulates."""
    pipeline: PipelineConfig
    """Its pipeline (sync, one-step-off, bounded:S, ...)."""
    engine: str
    """``simpy`` or ``fast``."""
    runner: Runner
    """The runner of :data:`RUNNERS` for (engine, pipeline kind)."""


def plan_run(
    scenario: Scenario, pipeline: PipelineConfig | None = None, engine: str = "simpy"
) -> RunPlan:
    """Check that ``pipeline`` (default: synchronous) runs ``scenario`` on ``engine`` and
    return the :class:`RunPlan`.

    Raises: ValueError as :func:`runner_for`, :func:`check_step_phases` and
    :func:`sim.pipelines.multi_turn.check_multi_turn`."""
    pipeline = pipeline if pipeline is not None else PipelineConfig()
    check_multi_turn(scenario, [pipeline], engine)
    check_step_phases(scenario, pipeline)
    return RunPlan(scenario, pipeline, engine, runner_for(pipeline, engine))


def simulate(
    scenario: Scenario,
    controller: Controller,
    cfg: RunConfig,
    pipeline: PipelineConfig | None = None,
    engine: str = "simpy",
    on_step: OnStep = None,
    rollout_path: str | os.PathLike | None = None,
) -> PipelineResult:
    """:func:`run_plan` of :func:`plan_run` ``(scenario, pipeline, engine)``: one run,
    checked then simulated. Raises as those two do."""
    return run_plan(plan_run(scenario, pipeline, engine), controller, cfg, on_step, rollout_path)


def run_plan(
    plan: RunPlan,
    controller: Controller,
    cfg: RunConfig,
    on_step: OnStep = None,
    rollout_path: str | os.PathLike | None = None,
) -> PipelineResult:
    """Simulate ``cfg.steps`` learner steps of ``plan`` (its scenario, pipeline and engine;
    checked by :func:`plan_run`, not here) under ``controller``.

    ``rollout_path``: write the rollout table to that parquet file and return it as a lazy
    scan (:func:`polars.scan_parquet`): the synchronous runners (SimPy and fast) stream it
    a few steps at a time (memory bounded by ~2^17 rollouts,
    :class:`sim.trace.stream.RolloutSink`), the asynchronous ones and multi-turn runs write
    their table when the run ends.

    Raises: ValueError as the runner does (a controller
    proposing G < 1, an ``async:S`` queue below B, dynamic sampling with ``async:S``);
    RuntimeError when an asynchronous learner can never fill a batch;
    :class:`sim.trace.schema.TraceError` on an invalid rollout row when writing.
    """
    scenario, pipeline, runner = plan.scenario, plan.pipeline, plan.runner
    log = UpdateLog()
    if rollout_path is None:
        return replace(runner(scenario, controller, cfg, pipeline, on_step, log), log=log)
    streams: dict[Runner, Callable] = {_sync_fast: run_sync_fast, _sync: run_sync}
    streaming = streams.get(runner) if scenario.multi_turn is None else None
    if streaming is not None:  # written a few steps at a time
        _, steps = streaming(scenario, controller, cfg, on_step, rollout_path=rollout_path, log=log)
        return PipelineResult(pl.scan_parquet(rollout_path), steps, log=log)
    result = replace(runner(scenario, controller, cfg, pipeline, on_step, log), log=log)
    sink = RolloutSink(rollout_path)
    sink.add(result.rollouts)
    sink.close()
    return replace(result, rollouts=pl.scan_parquet(rollout_path))
