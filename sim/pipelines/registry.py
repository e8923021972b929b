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

Studies (:mod:`sim.studies`) call :func:`simulate` and never choose a runner themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl
from rolloutlab.sim.control.contract import Controller
from rolloutlab.sim.pipelines.async_ledger import Ledger
from rolloutlab.sim.pipelines.async_pipeline import run_pipeline
from rolloutlab.sim.pipelines.async_stream import run_stream
from rolloutlab.sim.pipelines.multi_turn import check_multi_turn
from rolloutlab.sim.pipelines.spec import KINDS, PipelineConfig
from rolloutlab.sim.pipelines.sync import RunConfig, run_sync
from rolloutlab.sim.pipelines.sync_fast import run_sync_fast
from rolloutlab.sim.scenario.scenario import Scenario

OnStep = Callable[[int, int], None] | None
"""``on_step(step, G)`` after each learner step (progress bars), or None."""


@dataclass(frozen=True)
class PipelineResult:
    """What one simulated run produced (trace schema, :mod:`sim.trace.schema`)."""

    rollouts: pl.DataFrame
    """One row per rollout: consumed ones, and dropped or aborted ones
    (``finish_reason == "abort"``) where the pipeline has them."""
    steps: pl.DataFrame
    """One row per learner step."""
    ledger: Ledger | None = None
    """The asynchronous pipelines' accounting of every rollout generated, including those
    still buffered or generating at the end; None for the synchronous runners."""
    turns: pl.DataFrame | None = None
    """One row per model turn (:mod:`sim.trace.turns`) of a multi-turn run, else None."""


Runner = Callable[[Scenario, Controller, RunConfig, PipelineConfig, OnStep], PipelineResult]
"""``runner(scenario, controller, cfg, pipeline, on_step) -> PipelineResult``."""


def _sync(scenario, controller, cfg, pipeline, on_step) -> PipelineResult:
    turns: list[pl.DataFrame] = []
    rollouts, steps = run_sync(scenario, controller, cfg, on_step=on_step, turns=turns)
    if scenario.multi_turn is None:
        return PipelineResult(rollouts, steps)
    return PipelineResult(rollouts, steps, turns=pl.concat(turns) if turns else None)


def _sync_fast(scenario, controller, cfg, pipeline, on_step) -> PipelineResult:
    rollouts, steps = run_sync_fast(scenario, controller, cfg, on_step=on_step)
    assert rollouts is not None  # (None only when the caller streams them to a file)
    return PipelineResult(rollouts, steps)


def _batches(scenario, controller, cfg, pipeline, on_step) -> PipelineResult:
    turns: list[pl.DataFrame] = []
    result = run_pipeline(scenario, controller, cfg, pipeline, on_step=on_step, turns=turns)
    return PipelineResult(*result, turns=turns[0] if turns else None)


def _stream(scenario, controller, cfg, pipeline, on_step) -> PipelineResult:
    return PipelineResult(*run_stream(scenario, controller, cfg, pipeline, on_step=on_step))


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


def simulate(
    scenario: Scenario,
    controller: Controller,
    cfg: RunConfig,
    pipeline: PipelineConfig | None = None,
    engine: str = "simpy",
    on_step: OnStep = None,
) -> PipelineResult:
    """Simulate ``cfg.steps`` learner steps of ``pipeline`` (default: synchronous) under
    ``controller`` on ``engine``.

    Raises: ValueError as :func:`runner_for` and
    :func:`sim.pipelines.multi_turn.check_multi_turn`, and as the runner does (a controller
    proposing G < 1, an ``async:S`` queue below B, dynamic sampling with ``async:S``);
    RuntimeError when an asynchronous learner can never fill a batch.
    """
    pipeline = pipeline if pipeline is not None else PipelineConfig()
    check_multi_turn(scenario, [pipeline], engine)
    return runner_for(pipeline, engine)(scenario, controller, cfg, pipeline, on_step)
