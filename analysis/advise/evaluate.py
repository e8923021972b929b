"""One setting of ``rolloutlab advise`` priced by the simulator: its predicted time to the
target reward (or time per step), straggler rate and collapse margin.

A setting is a dict ``{"controller", "prompts", "workers", "max_num_seqs", "pipeline",
"lr", "updates_per_batch"}`` (``updates_per_batch``: K optimizer updates per rollout batch,
:attr:`sim.pipelines.sync.RunConfig.updates_per_batch`; 1 when absent). It runs :func:`sim.studies.compare.run_comparison` on the SimPy engine (every pipeline,
KV cache included; the synchronous pipeline on slot workers on the fast path, :func:`engine_for`) for ``steps`` learner steps with one seed, and reads:

- ``time_to_target_s``: first time the trailing-mean reward reaches the target
  (:func:`sim.models.learning.time_to_target`, docs/learning.md); null when not reached;
- ``time_per_step_s``: wall clock / steps (the objective when the scenario has no
  learning model);
- ``straggler_rate``: share of steps with max/median length > tau (SAGC's definition;
  with a ``straggler_level``, the share of steps whose group straggler share exceeds it,
  docs/metrics.md);
- ``collapse_margin``: ``eta_max(S, T) / eta(lr)``, the closed-form stability boundary
  of the staleness paper's two-constraint rule (PAPERS.md §2,
  :func:`sim.models.staleness.predict_eta_max`) at the setting's update span ``S_max + K``
  (an update consuming a rollout ``S_max`` versions old moves the policy ``S_max + 1``
  updates from the rollout's behaviour policy, and with K updates per batch mini-batch
  ``j`` trains ``j`` more updates off-policy, so the batch's last update spans
  ``S_max + K``: the rule the simulator's learning model collapses by) and the run's
  ``K T`` optimizer updates, over the surrogate learning rate the learning model maps
  ``lr`` to (:meth:`sim.models.learning.LearningModel.eta`). Above 1: no collapse
  predicted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl
from rolloutlab.sim.models.horizon import HorizonFit
from rolloutlab.sim.models.learning import LearningModel, LearningParams
from rolloutlab.sim.models.rewards import RewardConfig
from rolloutlab.sim.models.staleness import StalenessParams, predict_eta_max
from rolloutlab.sim.pipelines.spec import parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.scenario import Scenario
from rolloutlab.sim.studies.compare import plan_comparison, run_comparison
from rolloutlab.sim.trace.metrics import step_metrics

SETTING_KEYS = (
    "controller",
    "prompts",
    "workers",
    "max_num_seqs",
    "pipeline",
    "lr",
    "updates_per_batch",
)
"""The searched settings, in table order."""

METRIC_KEYS = (
    "time_to_target_s",
    "time_per_step_s",
    "wall_clock_s",
    "straggler_rate",
    "collapse_margin",
)
"""What :func:`evaluate` returns per setting."""


def collapse_margin(
    lr: float, max_staleness: int, T: int, learning: LearningParams | None, updates: int = 1
) -> float:
    """``predict_eta_max(max_staleness + updates, T * updates) / eta(lr)`` (module
    docstring) with the default :class:`StalenessParams` (the learning model's,
    :class:`sim.models.learning.LearningModel`): the span of a batch's last update is its
    rollouts' staleness plus the ``updates`` (K) mini-batch updates of that batch
    (:meth:`sim.models.rewards.RewardTracker.learn`), and the horizon counts optimizer
    updates, ``K`` per learner step, as the learning model's drift does. ``learning``
    None uses ``lr_ref = 1e-6, eta_ref = 0.01`` (:class:`LearningParams`' defaults).
    ``max_staleness`` is the pipeline's bound ``S_max``: where a run never trains a group
    that old (``async:S`` whose queue drops old groups first, docs/staleness.md) the
    margin is conservative (below 1 without a collapse), never the other way round."""
    params = learning or LearningParams(kappa=0.0)
    eta = LearningModel(params).eta(lr)
    span = max_staleness + updates
    return float(predict_eta_max(StalenessParams(), span, T * updates)) / eta


def collapse_horizon(
    fit: HorizonFit,
    lr: float,
    max_staleness: int,
    learning: LearningParams | None,
    updates: int = 1,
) -> tuple[float, float, float]:
    """``(median, lo, hi)`` predicted collapse step of a setting by a horizon law fitted to
    a simulated stability grid (``rolloutlab stability``'s ``horizon.json``,
    :mod:`sim.models.horizon`): at the update span ``max_staleness + updates`` and the
    surrogate learning rate ``eta(lr)``, exactly as :func:`collapse_margin` (16-84 %
    bootstrap interval over the grid's seeds)."""
    params = learning or LearningParams(kappa=0.0)
    eta = LearningModel(params).eta(lr)
    med, lo, hi = fit.predict(np.array([max_staleness + updates]), np.array([eta]))
    return float(med[0]), float(lo[0]), float(hi[0])


HORIZON_COLUMNS = ("horizon_steps", "horizon_lo", "horizon_hi")
"""Columns :func:`with_horizon` adds."""


def with_horizon(
    table: pl.DataFrame, fit: HorizonFit, learning: LearningParams | None
) -> pl.DataFrame:
    """``table`` (one row per trial, ``pipeline`` and ``lr`` columns, and
    ``updates_per_batch``, K, where searched: 1 without the column) with
    :data:`HORIZON_COLUMNS` (float, learner steps): :func:`collapse_horizon` of each row at
    its update span ``S_max + K``."""
    ks = table["updates_per_batch"] if "updates_per_batch" in table.columns else [1] * table.height
    rows = [
        collapse_horizon(fit, float(lr), parse_pipeline(p).max_staleness, learning, int(k))
        for p, lr, k in zip(table["pipeline"], table["lr"], ks)
    ]
    return table.with_columns(
        pl.Series(name, [r[i] for r in rows], dtype=pl.Float64)
        for i, name in enumerate(HORIZON_COLUMNS)
    )


def engine_for(scenario: Scenario, pipeline) -> str:
    """``fast`` for the synchronous pipeline on slot workers with one-turn rollouts (the
    fast path's tables equal the SimPy engine's to float rounding, ``tests/test_fastpath.py``;
    at B x G in the thousands it prices a trial several times faster), else ``simpy``."""
    if pipeline.kind == "sync" and not scenario.engine.paged and scenario.multi_turn is None:
        return "fast"
    return "simpy"


def group_straggler_rate(rollouts, scenario: Scenario, level: float) -> float:
    """Share of steps whose group straggler share (at the scenario's ``tau``) exceeds
    ``level``: the straggler rate under the group reading
    (:func:`sim.trace.metrics.straggler_reading`)."""
    tau = scenario.run_defaults.tau
    if isinstance(rollouts, pl.LazyFrame):
        rollouts = rollouts.collect()
    share = step_metrics(rollouts, tau, group_share=True)["group_straggler_share"]
    return float((share > level).mean())


def evaluate(
    setting: dict[str, Any],
    scenario: Scenario,
    rewards: RewardConfig | None,
    steps: int,
    target: float | None,
    seed: int = 0,
    dataset_size: int | None = None,
    placement: Callable[[Scenario, str], Scenario] | None = None,
    straggler_level: float | None = None,
) -> dict[str, Any]:
    """Simulate ``setting`` (module docstring) and return :data:`METRIC_KEYS` (seconds;
    rates in [0, 1]; the margin dimensionless, at the setting's span ``S_max + K`` and
    ``K * steps`` updates, ``K = setting["updates_per_batch"]``, 1 when absent).

    ``dataset_size``: as :class:`sim.pipelines.sync.RunConfig`'s (``--dataset-size``).
    ``placement(scenario, split)``: the scenario on a setting's ``split`` (``R:T``;
    :func:`sim.scenario.placement.apply_split`), which sets its workers.
    ``straggler_level``: read stragglers per group (:func:`group_straggler_rate` at that
    level) instead of over the whole step.
    Raises ValueError for a setting the simulator refuses (a bad controller or pipeline
    spec, B or workers < 1, a K that does not divide B,
    :func:`sim.models.rewards.check_updates`): the executor records it as a failed trial."""
    sc = dataclasses.replace(
        scenario,
        engine=dataclasses.replace(
            scenario.engine,
            n_workers=int(setting["workers"]),
            max_num_seqs=int(setting["max_num_seqs"]),
        ),
    )
    if setting.get("split") and placement is not None:
        sc = placement(sc, setting["split"])
    pipe = parse_pipeline(setting["pipeline"])
    cfg = RunConfig(
        steps=steps,
        prompts=int(setting["prompts"]),
        seed=seed,
        dataset_size=dataset_size,
        lr=float(setting["lr"]),
        rewards=rewards,
        updates_per_batch=int(setting.get("updates_per_batch", 1)),
    )
    plan = plan_comparison(
        sc,
        [setting["controller"]],
        cfg,
        pipelines=[pipe],
        engine=engine_for(sc, pipe),
        target=target,
    )
    result = run_comparison(plan)
    summary, rollouts = result.summary, result.rollouts
    row = summary.row(0, named=True)
    learning = rewards.learning if rewards is not None else None
    ttt = row.get("time_to_target_s")
    return {
        "time_to_target_s": None if ttt is None else float(ttt),
        "time_per_step_s": row["wall_clock_s"] / steps,
        "wall_clock_s": row["wall_clock_s"],
        "straggler_rate": row["straggler_rate"]
        if straggler_level is None
        else group_straggler_rate(rollouts, sc, straggler_level),
        "collapse_margin": collapse_margin(
            cfg.lr, pipe.max_staleness, steps, learning, cfg.updates_per_batch
        ),
    }
