"""``rolloutlab advise``'s search: the fastest setting that keeps stragglers and collapse
in bounds, with Optuna, and the Pareto table of what was tried.

Search: a multi-objective Optuna study (minimise time, minimise straggler rate, maximise
collapse margin) sampled by TPE with a ``constraints_func`` (Optuna's constrained
MOTPE; Ozaki et al., "Multiobjective tree-structured Parzen estimator", JAIR 2022; the
constraints given per trial with ``Trial.set_constraint``, which TPE and ``best_trials``
read). Trials are asked in batches of
``batch`` (``constant_liar`` keeps a batch's settings apart) and priced by ``run_batch``
(the CLI hands that to a grid executor, so a batch runs in parallel, locally or on Ray).
A setting already priced is not priced again: its earlier result is told for it.

Constraints (Optuna: a trial is feasible when every value is <= 0):
``straggler_rate - max_straggler_rate``, ``min_collapse_margin - collapse_margin`` and,
where time to target is the objective, ``1`` when the run did not reach the target.
The accelerator budget prunes the ``workers`` choices before the search (a setting over
budget is never tried).

The answer: the feasible trial with the smallest time (ties: lower straggler rate, then
larger margin, then trial number). The Pareto table: the feasible trials no other feasible
trial beats on all three objectives (:func:`finish`; what Optuna's constraint-aware
``study.best_trials`` holds, computed over the table so that trials priced after the
search, :mod:`.polish`, join it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import optuna
import polars as pl
from rolloutlab.analysis.advise.evaluate import METRIC_KEYS, SETTING_KEYS
from rolloutlab.sim.models.rewards import check_updates

DIRECTIONS: tuple[Literal["minimize", "maximize"], ...] = ("minimize", "minimize", "maximize")
"""Objectives: time (s), straggler rate, collapse margin."""


@dataclass(frozen=True)
class SearchSpace:
    """The choices per setting (each a non-empty tuple without repeats; :data:`SETTING_KEYS`).

    Raises ValueError on an empty or repeated choice list, and (:func:`check_updates`,
    naming ``--updates-per-batch``) on an ``updates_per_batch`` K that is not an int >= 1
    dividing every ``prompts`` B: every K is searched with every B."""

    controller: tuple[str, ...]
    prompts: tuple[int, ...]
    workers: tuple[int, ...]
    max_num_seqs: tuple[int, ...]
    pipeline: tuple[str, ...]
    lr: tuple[float, ...]
    updates_per_batch: tuple[int, ...] = (1,)
    """K optimizer updates per rollout batch (verl's ``train_batch_size /
    ppo_mini_batch_size``; :attr:`sim.pipelines.sync.RunConfig.updates_per_batch`)."""
    split: tuple[str, ...] = ()
    """``R:T`` GPU splits (``--gpus N --split``; the split sets the workers), or none."""

    @property
    def keys(self) -> tuple[str, ...]:
        """The searched settings: :data:`SETTING_KEYS`, and ``split`` when there are splits."""
        return SETTING_KEYS + (("split",) if self.split else ())

    def __post_init__(self) -> None:
        for key in SETTING_KEYS:
            values = getattr(self, key)
            if not values:
                raise ValueError(f"advise search space: no choices for {key}")
            if len(set(values)) != len(values):
                raise ValueError(f"advise search space: duplicated {key} choices {list(values)}")
        for k in self.updates_per_batch:
            for b in self.prompts:
                check_updates(k, b)

    def size(self) -> int:
        """Number of distinct settings."""
        n = 1
        for key in self.keys:
            n *= len(getattr(self, key))
        return n


@dataclass(frozen=True)
class Constraints:
    """``max_straggler_rate`` in [0, 1]; ``min_collapse_margin`` > 0 (1: no collapse
    predicted); ``accelerators``: generation accelerators allowed (workers x ``tp``), None
    for no budget."""

    max_straggler_rate: float = 0.5
    min_collapse_margin: float = 1.0
    accelerators: int | None = None
    tp: int = 1

    def prune(self, space: SearchSpace) -> SearchSpace:
        """``space`` without worker counts over the budget. Raises ValueError when none fits."""
        if self.accelerators is None:
            return space
        fit = tuple(w for w in space.workers if w * self.tp <= self.accelerators)
        if not fit:
            raise ValueError(
                f"--rollout-gpus {self.accelerators}: no --workers choice fits "
                f"(workers x tp = {[w * self.tp for w in space.workers]})"
            )
        return SearchSpace(**{**space.__dict__, "workers": fit})


def _objective_time(metrics: dict[str, Any], use_target: bool) -> float:
    """The time objective: time to target (the run's wall clock when not reached: a
    lower bound, and the trial is infeasible), else time per step."""
    if not use_target:
        return float(metrics["time_per_step_s"])
    ttt = metrics["time_to_target_s"]
    return float(metrics["wall_clock_s"] if ttt is None else ttt)


OBJECTIVES = ("time", "gpu-hours")
"""What the search minimises: the time objective (s), or it times the setting's GPUs
(GPU-hours = s x GPUs / 3600)."""


def gpu_hours(time_s: float, gpus: int) -> float:
    """``time_s * gpus / 3600``."""
    return time_s * gpus / 3600.0


def explain_infeasible(
    trials: pl.DataFrame, constraints: Constraints, use_target: bool, n: int = 5
) -> tuple[str, pl.DataFrame]:
    """Why no trial of :func:`search`'s table is feasible: one line counting the priced
    trials that break each constraint (and the failed ones), and the ``n`` closest
    trials: smallest total relative violation
    ``max(0, rate - max_rate) / max_rate + max(0, min_margin - margin) / min_margin``
    (+1 for a target not reached)."""
    ok = trials.filter(pl.col("status") == "ok")
    rate = pl.col("straggler_rate")
    margin = pl.col("collapse_margin")
    max_rate = max(constraints.max_straggler_rate, 1e-9)
    viol = (
        (rate - constraints.max_straggler_rate).clip(lower_bound=0) / max_rate
        + (constraints.min_collapse_margin - margin).clip(lower_bound=0)
        / constraints.min_collapse_margin
        + (pl.col("time_to_target_s").is_null() & pl.lit(use_target)).cast(pl.Float64)
    )
    counts = [
        f"straggler_rate > {constraints.max_straggler_rate} in "
        f"{ok.filter(rate > constraints.max_straggler_rate).height} (lowest "
        f"{ok['straggler_rate'].min() if ok.height else float('nan'):.3f})",
        f"collapse_margin < {constraints.min_collapse_margin} in "
        f"{ok.filter(margin < constraints.min_collapse_margin).height}",
    ]
    if use_target:
        counts.append(f"target not reached in {ok['time_to_target_s'].null_count()}")
    failed = trials.height - ok.height
    line = (
        f"no trial met the constraints: of {ok.height} priced trials, "
        + "; ".join(counts)
        + (f"; {failed} trials failed (see trials.csv)" if failed else "")
    )
    closest = ok.with_columns(viol.alias("violation")).sort("violation", "time_s").head(n)
    return line, closest


def priced_objective(
    metrics: dict[str, Any] | None,
    setting: dict[str, Any],
    constraints: Constraints,
    use_target: bool,
    objective: str = "time",
    gpus: Callable[[dict], int] | None = None,
    feasible_only: bool = True,
) -> float | None:
    """What :func:`search` minimises for one priced setting (the time objective, or its
    GPU-hours with ``objective="gpu-hours"``), or None for a failed setting, one that
    did not reach the target (with ``use_target``), or (``feasible_only``) one that
    breaks a constraint: how a setting priced outside the search is ranked beside it."""
    if metrics is None or "error" in metrics:
        return None
    if use_target and metrics.get("time_to_target_s") is None:
        return None
    if feasible_only and not all(v <= 0 for v in _constraints(metrics, constraints, use_target)):
        return None
    t = _objective_time(metrics, use_target)
    return gpu_hours(t, gpus(setting)) if objective == "gpu-hours" and gpus else t


CONSTRAINT_NAMES = ("straggler_rate", "collapse_margin", "reached_target")
"""Names of the Optuna constraints (:meth:`optuna.trial.Trial.set_constraint`)."""


def _constraints(metrics: dict[str, Any], c: Constraints, use_target: bool) -> list[float]:
    return [
        float(metrics["straggler_rate"]) - c.max_straggler_rate,
        c.min_collapse_margin - float(metrics["collapse_margin"]),
        1.0 if use_target and metrics["time_to_target_s"] is None else 0.0,
    ]


def search(
    space: SearchSpace,
    constraints: Constraints,
    run_batch: Callable[[list[dict]], Sequence[dict | None]],
    n_trials: int,
    batch: int = 1,
    seed: int = 0,
    use_target: bool = True,
    objective: str = "time",
    gpus: Callable[[dict], int] | None = None,
) -> pl.DataFrame:
    """Run the study (module docstring); returns one row per trial: ``trial``,
    :data:`SETTING_KEYS`, :data:`METRIC_KEYS` (null for a failed setting), ``time_s`` (the
    objective), ``feasible``, ``pareto``, ``best`` (exactly one true row unless no trial is
    feasible), ``status`` and ``error``.

    ``run_batch(settings)`` prices settings (dicts of :data:`SETTING_KEYS`) and returns one
    metrics dict per setting (:data:`METRIC_KEYS`, with an ``error`` key instead for a
    failed one). ``use_target``: time to target is the objective (else time per step).
    ``objective``: ``time``, or ``gpu-hours`` (the time objective times ``gpus(setting)``
    / 3600; the table gains ``gpus`` and ``gpu_hours``, and the Pareto front and the
    answer minimise GPU-hours). Raises ValueError: ``n_trials`` or ``batch`` < 1, an
    unknown objective or ``gpu-hours`` without ``gpus``.
    """
    if n_trials < 1 or batch < 1:
        raise ValueError(f"advise: need --trials >= 1 and a batch >= 1, got {n_trials}, {batch}")
    if objective not in OBJECTIVES or (objective == "gpu-hours" and gpus is None):
        raise ValueError(
            f"advise: objective must be one of {OBJECTIVES} (gpu-hours needs a GPU count)"
        )
    space = constraints.prune(space)
    sampler = optuna.samplers.TPESampler(
        seed=seed,
        multivariate=True,
        constant_liar=True,
        n_startup_trials=min(10, n_trials),
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=list(DIRECTIONS), sampler=sampler)
    priced: dict[str, dict] = {}
    rows: list[dict] = []
    while len(rows) < n_trials:
        trials = [study.ask() for _ in range(min(batch, n_trials - len(rows)))]
        settings = [
            {k: t.suggest_categorical(k, list(getattr(space, k))) for k in space.keys}
            for t in trials
        ]
        keys = [json.dumps(s, sort_keys=True) for s in settings]
        new = [s for k, s in dict(zip(keys, settings)).items() if k not in priced]
        for s, m in zip(new, run_batch(new)):
            priced[json.dumps(s, sort_keys=True)] = m or {"error": "no result"}
        for t, s, k in zip(trials, settings, keys):
            row, cons, values = trial_row(
                t.number, s, priced[k], constraints, use_target, objective, gpus
            )
            if values is None:
                study.tell(t, state=optuna.trial.TrialState.FAIL)
            else:
                for name, value in zip(CONSTRAINT_NAMES, cons):
                    t.set_constraint(name, value)
                study.tell(t, values)
            rows.append(row)
    return finish(rows, space.keys, objective)


def trial_row(
    number: int,
    setting: dict,
    metrics: dict[str, Any],
    constraints: Constraints,
    use_target: bool,
    objective: str = "time",
    gpus: Callable[[dict], int] | None = None,
) -> tuple[dict[str, Any], list[float], list[float] | None]:
    """One priced setting as a row of :func:`search`'s table (before :func:`finish`), its
    constraint values (<= 0: met) and its objectives (:data:`DIRECTIONS`; None for a
    failed setting, whose row has ``status`` ``failed`` and the error)."""
    row = {"trial": number, **setting, **{key: metrics.get(key) for key in METRIC_KEYS}}
    if "error" in metrics:
        failed = {"time_s": None, "feasible": False, "status": "failed", "error": metrics["error"]}
        return {**row, **failed}, [], None
    cons = _constraints(metrics, constraints, use_target)
    time_s = _objective_time(metrics, use_target)
    cost = time_s
    if gpus is not None:
        row["gpus"] = int(gpus(setting))
        row["gpu_hours"] = gpu_hours(time_s, row["gpus"])
        if objective == "gpu-hours":
            cost = row["gpu_hours"]
    values = [cost, float(metrics["straggler_rate"]), float(metrics["collapse_margin"])]
    feasible = all(v <= 0 for v in cons)
    return (
        {**row, "time_s": time_s, "feasible": feasible, "status": "ok", "error": None},
        cons,
        values,
    )


def finish(rows: list[dict], keys: Sequence[str], objective: str = "time") -> pl.DataFrame:
    """:func:`search`'s table from :func:`trial_row`'s rows (any extra column, such as
    ``origin``, kept after ``error``): ``pareto`` marks the feasible rows no other
    feasible row beats on all three objectives (:data:`DIRECTIONS`, the cost being
    GPU-hours with ``objective="gpu-hours"``), ``best`` the feasible row with the smallest
    cost (ties: lower straggler rate, then larger margin, then trial number)."""
    df = pl.DataFrame(rows, infer_schema_length=None).with_columns(
        *(pl.col(k).cast(pl.Float64) for k in METRIC_KEYS),
        pl.col("time_s").cast(pl.Float64),
        pl.col("error").cast(pl.String),
    )
    key = "gpu_hours" if objective == "gpu-hours" else "time_s"
    feas = df.filter("feasible")
    objs = feas.select(key, "straggler_rate", -pl.col("collapse_margin")).to_numpy()
    # row i is dominated when some row is no worse on every objective and better on one
    no_worse = (objs[None, :, :] <= objs[:, None, :]).all(axis=2)
    better = (objs[None, :, :] < objs[:, None, :]).any(axis=2)
    dominated = pl.Series((no_worse & better).any(axis=1), dtype=pl.Boolean)
    pareto = feas.filter(~dominated)["trial"] if feas.height else []
    best = (
        feas.sort(
            key,
            "straggler_rate",
            "collapse_margin",
            "trial",
            descending=[False, False, True, False],
        )
        .head(1)["trial"]
        .to_list()
    )
    extra = [c for c in ("gpus", "gpu_hours") if c in df.columns]
    cols = ["trial", *keys, *METRIC_KEYS, "time_s", *extra, "feasible", "pareto"]
    tail = [c for c in df.columns if c not in (*cols, "best", "status", "error")]
    return df.with_columns(
        pl.col("trial").is_in(list(pareto)).alias("pareto"),
        pl.col("trial").is_in(best).alias("best"),
    ).select(*cols, "best", "status", "error", *tail)


def pareto_table(trials: pl.DataFrame) -> pl.DataFrame:
    """The Pareto rows of :func:`search`'s table, fastest first, one per distinct setting."""
    return (
        trials.filter("pareto")
        .unique(
            subset=[k for k in (*SETTING_KEYS, "split") if k in trials.columns],
            keep="first",
            maintain_order=True,
        )
        .sort("time_s", "trial")
    )
