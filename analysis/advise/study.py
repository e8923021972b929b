"""``rolloutlab advise``'s study: every trial of the search priced by a grid executor, the
table and its Pareto front written, the figure drawn and the run's settings recorded.

The CLI parses the options into a :class:`~.search.SearchSpace` and
:class:`~.search.Constraints`, loads the scenario and hands them here with an executor
(anything with :class:`Executor`'s two methods: ``rolloutlab.commands.grid.executor``'s
local and Ray executors); this module only runs and writes.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import polars as pl
from rolloutlab.analysis.advise.caveats import (
    SPREAD_SEEDS,
    TIE_FLOOR,
    Choice,
    assumptions,
    choice_header,
    choices,
    neighbours,
    relative_spread,
)
from rolloutlab.analysis.advise.evaluate import evaluate, with_horizon
from rolloutlab.analysis.advise.polish import Polish, default_budget, polish
from rolloutlab.analysis.advise.search import (
    Constraints,
    SearchSpace,
    pareto_table,
    priced_objective,
    search,
)
from rolloutlab.sim.models.horizon import HorizonFit
from rolloutlab.sim.models.rewards import RewardConfig
from rolloutlab.sim.scenario.placement import place
from rolloutlab.sim.scenario.provenance import write_config
from rolloutlab.sim.scenario.scenario import Scenario
from rolloutlab.sim.trace.progress import progress_bar


class Executor(Protocol):
    """What the study needs of a grid executor: ``run(fn, items, on_outcome)`` calls
    ``fn(point)`` for each ``(index, point)`` of ``items`` and ``on_outcome(outcome)`` (with
    ``index``, ``status`` ``"ok"`` or ``"failed"``, ``value``, ``error``) as each finishes;
    ``close()`` frees its workers."""

    def run(self, fn: Callable[[Any], Any], items: Any, on_outcome: Callable[[Any], None]) -> None:
        """Price every point; report each outcome as it finishes."""

    def close(self) -> None:
        """Release the executor's workers."""


@dataclass(frozen=True)
class Placement:
    """``--gpus`` split into rollout and trainer GPUs (:func:`sim.scenario.placement.place`):
    ``gpus`` in all, tensor parallel ``tp``, ``model`` and ``gpu`` names."""

    gpus: int
    tp: int
    model: str
    gpu: str

    def __call__(self, scenario: Scenario, split: str) -> Scenario:
        """``scenario`` on split ``R:T`` of :attr:`gpus`."""
        return place(scenario, split, self.gpus, self.tp, self.model, self.gpu)


@dataclass(frozen=True)
class AdviseResult:
    """What :func:`advise_study` found, beside what it searched."""

    trials: pl.DataFrame
    """One row per trial (:func:`search`'s table; ``workers`` set from the split's rollout
    GPUs / tp when splits were searched; :data:`HORIZON_COLUMNS` with a horizon fit)."""
    pareto: pl.DataFrame
    """:func:`pareto_table` of :attr:`trials`."""
    use_target: bool
    """Time to the target reward was the objective (else time per step)."""
    space: SearchSpace
    constraints: Constraints
    objective: str
    """``time`` or ``gpu-hours`` (:data:`~.search.OBJECTIVES`)."""
    target: float | None
    """Target reward, or None."""
    straggler_level: float | None
    """The group reading's level, or None for the step-level straggler ratio."""
    horizon: bool
    """Each trial carries its predicted collapse step (:data:`HORIZON_COLUMNS`)."""
    assumptions: tuple[str, ...] = ()
    """The model assumptions the scenario did not measure (:func:`caveats.assumptions`)."""
    choices: tuple[Choice, ...] = ()
    """Each searched knob of the chosen setting against its runner-up
    (:func:`caveats.choices`); empty when no trial is feasible."""
    spread: float | None = None
    """Run-to-run spread of the chosen setting's objective (relative sd over
    :data:`caveats.SPREAD_SEEDS` seeds), None when it could not be had."""
    polish: Polish | None = None
    """The neighbour polish after the search (:mod:`.polish`)."""

    def caveat_lines(self) -> list[str]:
        """What is printed under the answer (and shown on the report page): the
        assumption lines, the tie rule, one line per choice."""
        unit = "GPU-h" if self.objective == "gpu-hours" else "s"
        lines = [self.polish.line(unit)] if self.polish is not None else []
        lines += ["assumed, not measured by the scenario:", *(f"  {a}" for a in self.assumptions)]
        if self.choices:
            lines += [choice_header(self.spread), *(f"  {c.line(unit)}" for c in self.choices)]
        return lines


def setting_gpus(setting: dict, tp: int, total: int | None) -> int:
    """GPUs a setting holds: ``total`` (``--gpus``) with a split, else workers x ``tp``
    (colocated: the learner runs on the generation GPUs)."""
    return int(total) if setting.get("split") and total else int(setting["workers"]) * tp


def _evaluate_at(point: tuple[dict, int], **kwargs: Any) -> dict[str, Any]:
    """:func:`evaluate` of ``point = (setting, seed)`` (a module-level function, so a
    spawned executor can pickle it)."""
    setting, seed = point
    return evaluate(setting, seed=seed, **kwargs)


def _spread(
    table: pl.DataFrame,
    space: SearchSpace,
    price: Callable[[list[tuple[dict, int]]], list[dict | None]],
    seed: int,
    score: Callable[..., float | None],
    column: str,
) -> float | None:
    """Run-to-run spread (:func:`relative_spread`) of ``table``'s answer: its objective
    ``column`` at ``seed`` and at :data:`SPREAD_SEEDS` - 1 more seeds priced by ``price``
    (``(setting, seed)`` points, one metrics dict or None each; ``score(metrics, setting,
    feasible_only=)`` ranks them as the search does). None without an answer."""
    best = table.filter("best")
    if not best.height:
        return None
    row = best.row(0, named=True)
    chosen = {k: row[k] for k in space.keys}
    results = price([(chosen, seed + i) for i in range(1, SPREAD_SEEDS)])
    return relative_spread(
        [float(row[column]), *(score(m, chosen, feasible_only=False) for m in results)]
    )


def _check_choices(
    table: pl.DataFrame,
    space: SearchSpace,
    constraints: Constraints,
    price: Callable[[list[tuple[dict, int]]], list[dict | None]],
    seed: int,
    score: Callable[..., float | None],
    column: str,
    spread: float | None,
) -> list[Choice]:
    """The chosen setting's knobs against their runners-up (:mod:`.caveats`) with the
    chosen setting's run-to-run ``spread`` (:func:`_spread`). ``table``: :func:`search`'s
    (and the polish's, before the split's workers are filled in); ``column``: its
    objective (``time_s`` or ``gpu_hours``). The neighbours no trial priced are priced by
    ``price`` at ``seed`` and ranked by ``score`` (:func:`_spread`)."""
    best = table.filter("best")
    if not best.height:
        return []
    row = best.row(0, named=True)
    chosen = {k: row[k] for k in space.keys}

    def key(setting: dict) -> str:
        return json.dumps(setting, sort_keys=True)

    pruned = constraints.prune(space)
    varied = {k: tuple(getattr(pruned, k)) for k in space.keys if len(getattr(pruned, k)) > 1}
    near = neighbours(chosen, varied)
    known = {key({k: r[k] for k in space.keys}): r for r in table.iter_rows(named=True)}
    todo = list({key(s): s for _, s in near if key(s) not in known}.values())
    fresh = {key(s): m for s, m in zip(todo, price([(s, seed) for s in todo]))}
    priced = []
    for knob, s in near:
        r = known.get(key(s))
        if r is not None:
            t = r[column] if r["feasible"] else None
        else:
            t = score(fresh[key(s)], s)
        priced.append((knob, s, None if t is None else float(t)))
    return choices(chosen, float(row[column]), priced, spread)


def advise_study(
    space: SearchSpace,
    constraints: Constraints,
    scenario: Scenario,
    rewards: RewardConfig | None,
    target: float | None,
    executor: Executor,
    out_dir: Path,
    *,
    steps: int,
    trials: int,
    batch: int,
    seed: int,
    objective: str,
    tp: int = 1,
    placement: Placement | None = None,
    dataset_size: int | None = None,
    straggler_level: float | None = None,
    horizon: HorizonFit | None = None,
    polish_trials: int | None = None,
    record: tuple[dict[str, Any], dict[str, Any]] = ({}, {}),
) -> AdviseResult:
    """Search ``space`` under ``constraints`` (:func:`search`, ``trials`` trials asked
    ``batch`` at a time, each setting simulated ``steps`` learner steps by
    :func:`evaluate` on ``executor``), then polish its answer (:func:`.polish.polish`,
    ``polish_trials`` settings at most, None for :func:`.polish.default_budget`, 0 for
    none), closing the executor at the end. ``placement``: the
    split's GPUs (required when ``space.split`` is set). Writes ``out_dir``/trials.csv,
    pareto.csv, advise.png and config.json (``record``: the config keys before and after the
    study's own: the command's head and its reward and executor description). Raises what
    :func:`search` raises (ValueError on a bad trial count or objective)."""
    use_target = rewards is not None and rewards.learns and target is not None
    kwargs: dict[str, Any] = {
        "placement": placement if space.split else None,
        "scenario": scenario,
        "rewards": rewards,
        "steps": steps,
        "target": target,
        "dataset_size": dataset_size,
        "straggler_level": straggler_level,
    }
    total = placement.gpus if placement is not None else None
    gpus = functools.partial(setting_gpus, tp=tp, total=total)

    def price(points: list[tuple[dict, int]]) -> list[dict | None]:
        results: list[dict | None] = [None] * len(points)

        def keep(o) -> None:
            results[o.index] = o.value if o.status == "ok" else {"error": o.error}

        executor.run(functools.partial(_evaluate_at, **kwargs), list(enumerate(points)), keep)
        return results

    def run_settings(settings: list[dict]) -> list[dict | None]:
        return price([(s, seed) for s in settings])

    def run_batch(settings: list[dict]) -> list[dict | None]:
        results = run_settings(settings)
        bar.update(len(settings))
        return results

    pruned = constraints.prune(space)
    knobs = sum(len(getattr(pruned, k)) > 1 for k in space.keys)
    budget = default_budget(knobs) if polish_trials is None else polish_trials
    bar = progress_bar(total=trials, desc="advise", unit="trial")  # settings priced so far
    try:
        table = search(
            space,
            constraints,
            run_batch,
            trials,
            batch,
            seed,
            use_target,
            objective=objective,
            gpus=gpus,
        )
        score = functools.partial(
            priced_objective,
            constraints=constraints,
            use_target=use_target,
            objective=objective,
            gpus=gpus,
        )
        column = "gpu_hours" if objective == "gpu-hours" else "time_s"
        spread = _spread(table, space, price, seed, score, column)
        polished = polish(
            table,
            space,
            constraints,
            run_settings,
            max(spread or 0.0, TIE_FLOOR),
            budget,
            use_target=use_target,
            objective=objective,
            gpus=gpus,
        )
        table = polished.table
        if polished.moved:
            spread = _spread(table, space, price, seed, score, column)
        picks = _check_choices(table, space, constraints, price, seed, score, column, spread)
    finally:
        bar.close()
        executor.close()
    if space.split:  # the split sets the workers: show them (rollout GPUs / tp)
        table = table.with_columns(
            (pl.col("split").str.split(":").list.first().cast(pl.Int64) // tp).alias("workers")
        )
    if horizon is not None:
        table = with_horizon(table, horizon, rewards.learning if rewards is not None else None)
    pareto = pareto_table(table)
    table.write_csv(out_dir / "trials.csv")
    pareto.write_csv(out_dir / "pareto.csv")
    label = "time to target reward (s)" if use_target else "time per step (s)"
    from rolloutlab.analysis.advise.plots import advise_figure  # seaborn: not for --help

    advise_figure(table, out_dir / "advise.png", label, constraints.max_straggler_rate)
    varied = {k for k in space.keys if len(getattr(space, k)) > 1}
    result = AdviseResult(
        table,
        pareto,
        use_target,
        space,
        constraints,
        objective,
        target,
        straggler_level,
        horizon is not None,
        tuple(assumptions(scenario, space.lr, varied, use_target)),
        tuple(picks),
        spread,
        polished,
    )
    head, tail = record
    unit = "GPU-h" if objective == "gpu-hours" else "s"
    write_config(
        out_dir / "config.json",
        {
            **head,
            "space": {k: list(getattr(space, k)) for k in space.keys},
            "constraints": constraints.__dict__,
            "straggler_reading": "step"
            if straggler_level is None
            else {"reading": "group", "level": straggler_level},
            "objective": ("gpu_hours of " if objective == "gpu-hours" else "")
            + ("time_to_target_s" if use_target else "time_per_step_s"),
            "steps": steps,
            "dataset_size": dataset_size,
            "trials": trials,
            "batch": batch,
            "seed": seed,
            "polish": {
                "budget": polished.budget,
                "trials": polished.trials,
                "rounds": polished.rounds,
                "threshold": polished.threshold,
                "moved": polished.moved,
                "line": polished.line(unit),
            },
            "caveats": {
                "assumptions": list(result.assumptions),
                "spread": spread,
                "spread_seeds": SPREAD_SEEDS,
                "choices": [c.to_dict() for c in picks],
                "lines": result.caveat_lines(),
            },
            **tail,
        },
    )
    return result
