"""Every ``timing_s/*`` phase of a verl step: its share of ``timing_s/step``, what prices
it, and the fits of the phases that are not generation or the learner (the reward phase,
the periodic phases).

verl's trainer (``verl/trainer/ppo/ray_trainer.py``, ``fit``) times each phase of a step
with ``marked_timer(name)`` inside ``marked_timer("step")``; some timers run inside
others. :data:`NESTED` names those (their time is already in the outer one), and
:data:`OUTSIDE` those outside the step timer; every other tag is a top-level phase, and
``timing_s/step`` minus the top-level phases is reported as ``other``. A tag nobody
prices is named with its share, never dropped.

Reward phase (:class:`sim.models.step_phases.RewardPhase`). The log gives only the
reward phase's duration per step, not per-rollout latencies, so the latency law's
*shape* (family and spread) and the reward workers' concurrency ``W`` are assumptions
(stored in the calibration), and one number is fitted: the scale ``k`` such that the
simulated makespan of ``n = B G`` requests on ``W`` FIFO workers
(:func:`sim.models.step_phases.reward_finish_s`, mean over ``R`` draws) equals the median
logged reward window. Makespan is linear in ``k`` when all requests arrive together, so
``k = median window / simulated makespan of the unscaled law`` exactly. The window and
the overlap are read from the tags:

* ``timing_s/reward`` above ``timing_s/adv`` (median): rewards computed inside the
  ``reward`` timer (``overlap="after"``); window = ``reward``.
* else (verl's asynchronous reward, launched in ``reward`` and awaited in ``adv``):
  ``overlap="learner"``; window = ``old_log_prob + ref + adv`` (the advantage
  computation itself is assumed 0 s: it is not separable from the wait), and the step
  also pays the median ``reward`` (the requests' submission) as ``adv_s``; the share of
  the learner that hides it is the median of ``(old_log_prob + ref) / (old_log_prob +
  ref + update_actor)``. When ``adv`` is under 10 % of ``old_log_prob + ref`` the
  rewards are hidden and the window is not identified: the phase is priced as ``adv``
  alone and the fit says so.

Periodic phase: a tag logged on a subset of steps; period = the most common gap between
consecutive logged steps, time = the median; logged steps off the period (verl also runs
both at the last step) are counted and reported.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import polars as pl
from rolloutlab.sim.models.step_phases import (
    PeriodicPhase,
    RewardLatency,
    RewardPhase,
    StepPhases,
    reward_finish_s,
)

STEP_TAG = "timing_s/step"
NESTED = {
    "generate_sequences": "gen",
    "reshard": "gen",
    "gen_max": "gen",
    "update_policy": "update_actor",
    "load_param": "update_actor",
    "offload_param": "update_actor",
    "load_optim": "update_actor",
    "offload_optim": "update_actor",
}
"""Timers that run inside another (value: the outer phase)."""
OUTSIDE = ("start_profile", "stop_profile")
"""Timers outside ``marked_timer("step")``."""
PERIODIC = ("testing", "save_checkpoint")
PRICED_BY = {
    "gen": "decode cost (engine)",
    "old_log_prob": "learner cost",
    "ref": "learner cost",
    "update_actor": "learner cost",
    "reward": "reward phase",
    "adv": "reward phase (wait + advantage)",
    "testing": "periodic",
    "save_checkpoint": "periodic",
}
"""Top-level phase -> the part of the step model that prices it."""


@dataclass(frozen=True)
class PhaseRow:
    """One ``timing_s/*`` tag of a run."""

    phase: str
    kind: str
    """``top`` (a phase of the step), ``nested in X``, ``outside step`` or ``other``."""
    steps_logged: int
    median_s: float
    share: float
    """Sum over the steps with ``timing_s/step`` of this tag / sum of ``timing_s/step``."""
    priced_by: str
    """The model part that prices it, ``not priced``, or ``(inside X)``."""


def phase_table(table: pl.DataFrame) -> list[PhaseRow]:
    """Every ``timing_s/*`` tag of ``table`` (one row per step, verl tags as columns) with
    its share of ``timing_s/step``, plus ``other`` (step minus the top-level phases).

    Raises ValueError when ``timing_s/step`` is missing or never positive.
    """
    if STEP_TAG not in table.columns:
        raise ValueError(f"no {STEP_TAG!r} tag: the step's phases cannot be shared out")
    rows = table.filter(pl.col(STEP_TAG).is_not_null() & (pl.col(STEP_TAG) > 0))
    if rows.height == 0:
        raise ValueError(f"tag {STEP_TAG!r}: no step with a positive value")
    total = float(rows[STEP_TAG].sum())
    out, top_sum = [], np.zeros(rows.height)
    for tag in sorted(c for c in table.columns if c.startswith("timing_s/") and c != STEP_TAG):
        name = tag.split("/", 1)[1]
        v = rows[tag].fill_null(0.0).to_numpy()
        logged = table[tag].drop_nulls()
        if name in NESTED:
            kind, priced = f"nested in {NESTED[name]}", f"(inside {NESTED[name]})"
        elif name in OUTSIDE:
            kind, priced = "outside step", "(outside the step)"
        else:
            kind, priced = "top", PRICED_BY.get(name, "not priced")
            top_sum += v
        out.append(
            PhaseRow(
                name,
                kind,
                int(logged.len()),
                float(logged.median()) if logged.len() else float("nan"),
                float(v.sum() / total),
                priced,
            )
        )
    other = rows[STEP_TAG].to_numpy() - top_sum
    out.append(
        PhaseRow(
            "other",
            "other",
            rows.height,
            float(np.median(other)),
            float(other.sum() / total),
            "not priced",
        )
    )
    return out


def explained_share(rows: list[PhaseRow]) -> float:
    """Share of ``timing_s/step`` in top-level phases the model prices."""
    return float(sum(r.share for r in rows if r.kind == "top" and r.priced_by != "not priced"))


@dataclass(frozen=True)
class RewardFit:
    """The fitted reward phase and how it was read."""

    phase: RewardPhase
    scale: float
    """``k``: fitted latency = ``k`` x the assumed law."""
    window_median_s: float
    """Median logged reward window (s)."""
    window_cv: float
    """Step-to-step coefficient of variation of the logged window."""
    simulated_s: float
    """Mean simulated makespan of the fitted law (s)."""
    identified: bool
    note: str


def _col(table: pl.DataFrame, name: str) -> np.ndarray:
    tag = f"timing_s/{name}"
    if tag not in table.columns:
        return np.zeros(table.height)
    return table[tag].fill_null(0.0).to_numpy()


def fit_reward_phase(
    table: pl.DataFrame,
    n_rollouts: int,
    shape: RewardLatency,
    workers: int,
    overlap: str | None = None,
    replicates: int = 4,
    seed: int = 0,
) -> RewardFit | None:
    """Fit the reward phase of ``table``'s steps (module docstring); ``None`` when the log
    has neither ``timing_s/reward`` nor ``timing_s/adv``.

    ``n_rollouts``: rollouts per step (``B G``); ``shape``: the assumed latency law
    (scaled by the fit); ``workers``: concurrency; ``overlap``: ``None`` = read from the
    tags. Raises ValueError for ``n_rollouts < 1`` or an unscalable law (mean 0).
    """
    if n_rollouts < 1:
        raise ValueError(f"reward fit: n_rollouts must be >= 1, got {n_rollouts}")
    if not any(f"timing_s/{t}" in table.columns for t in ("reward", "adv")):
        return None
    rows = table.filter(pl.col(STEP_TAG).is_not_null()) if STEP_TAG in table.columns else table
    reward, adv = _col(rows, "reward"), _col(rows, "adv")
    olp, ref, upd = _col(rows, "old_log_prob"), _col(rows, "ref"), _col(rows, "update_actor")
    if overlap is None:
        overlap = "after" if np.median(reward) >= np.median(adv) else "learner"
    hidden = olp + ref
    share = float(np.median(hidden / np.maximum(hidden + upd, 1e-12))) if upd.any() else 0.0
    if overlap == "after":
        window, adv_s = reward, float(np.median(adv))
    else:  # the step pays the requests' submission (the reward timer) and the wait
        window, adv_s = hidden + adv, float(np.median(reward))
    identified = overlap == "after" or np.median(adv) >= 0.1 * np.median(hidden)
    if not identified:
        phase = RewardPhase(
            RewardLatency("constant", 0.0), workers, overlap, share, float(np.median(adv))
        )
        return RewardFit(
            phase,
            0.0,
            float(np.median(adv)),
            0.0,
            0.0,
            False,
            "rewards hidden behind old_log_prob + ref: latency not identified, priced as adv alone",
        )
    if shape.mean_s() <= 0:
        raise ValueError(f"reward fit: the assumed latency law {shape} has mean 0")
    unit = float(
        np.mean(
            [
                reward_finish_s(
                    np.zeros(n_rollouts),
                    shape.sample(np.random.default_rng([seed, 0x5EED, r]), n_rollouts),
                    workers,
                )
                for r in range(replicates)
            ]
        )
    )
    med = float(np.median(window))
    k = med / unit
    phase = RewardPhase(shape.scaled(k), workers, overlap, share, adv_s)
    return RewardFit(
        phase,
        float(k),
        med,
        float(np.std(window) / max(np.mean(window), 1e-12)),
        float(unit * k),
        True,
        f"window = {'reward' if overlap == 'after' else 'old_log_prob + ref + adv'}",
    )


@dataclass(frozen=True)
class PeriodicFit:
    phase: PeriodicPhase
    logged_steps: list[int]
    off_period_steps: list[int]
    """Logged steps that are not multiples of the period (verl's last step)."""


def fit_periodic(table: pl.DataFrame, name: str) -> PeriodicFit | None:
    """The periodic phase ``timing_s/name`` (module docstring); ``None`` when it is logged
    on fewer than 2 steps (no period to read)."""
    tag = f"timing_s/{name}"
    if tag not in table.columns:
        return None
    rows = table.filter(pl.col(tag).is_not_null())
    steps = rows["step"].to_numpy()
    if len(steps) < 2:
        return None
    gaps, counts = np.unique(np.diff(steps), return_counts=True)
    every = int(gaps[np.argmax(counts)])
    on = steps % every == 0
    return PeriodicFit(
        PeriodicPhase(name, every, float(np.median(rows[tag].to_numpy()[on]))),
        steps.tolist(),
        steps[~on].tolist(),
    )


def fit_step_phases(
    tables: list[pl.DataFrame],
    n_rollouts: int,
    shape: RewardLatency,
    workers: int,
    overlap: str | None = None,
    seed: int = 0,
) -> tuple[StepPhases | None, dict]:
    """The reward and periodic phases of runs pooled (``tables``: one per run, verl tags
    as columns) and a JSON-able report (``reward``: the fit and its reading;
    ``periodic``: period, seconds, logged and off-period steps per phase).
    ``None`` when the logs have neither phase."""
    pooled = pl.concat(tables, how="diagonal_relaxed")
    rf = fit_reward_phase(pooled, n_rollouts, shape, workers, overlap, seed=seed)
    periodic = []
    report: dict = {"reward": None, "periodic": []}
    for name in PERIODIC:
        fits = [f for t in tables if (f := fit_periodic(t, name)) is not None]
        if not fits:
            continue
        every = fits[0].phase.every
        secs = float(np.median([f.phase.seconds for f in fits]))
        periodic.append(PeriodicPhase(name, every, secs))
        report["periodic"].append(
            {
                "name": name,
                "every": every,
                "seconds": secs,
                "periods_by_run": [f.phase.every for f in fits],
                "off_period_steps_by_run": [f.off_period_steps for f in fits],
            }
        )
    if rf is not None:
        report["reward"] = {
            "overlap": rf.phase.overlap,
            "overlap_read_from_log": overlap is None,
            "assumed_latency": asdict(shape),
            "assumed_workers": workers,
            "n_rollouts": n_rollouts,
            "scale": rf.scale,
            "window_median_s": rf.window_median_s,
            "window_cv": rf.window_cv,
            "identified": rf.identified,
            "note": rf.note,
        }
    if rf is None and not periodic:
        return None, report
    return StepPhases(None if rf is None else rf.phase, tuple(periodic)), report


BASELINE_FEATURES = ("response_length/mean", "response_length/max")
"""Features of the linear rule for ``timing_s/step``, after a constant."""

STEP_PARTS = {
    "gen": ("gen",),
    "learner": ("old_log_prob", "ref", "update_actor"),
    "reward_wait": ("reward", "adv"),
    "periodic": ("testing", "save_checkpoint"),
}
"""The step model's parts and the verl phases (``timing_s/*``) each one prices; the weight
sync has no tag of its own (verl times ``reshard`` inside ``gen``)."""


def part_seconds(table: pl.DataFrame, part: str) -> np.ndarray:
    """``(n_steps,)`` seconds of one of :data:`STEP_PARTS` per row of ``table``: the sum of
    its ``timing_s/*`` tags, a tag not logged at a step counting 0 (a periodic phase runs
    on some steps only)."""
    out = np.zeros(table.height)
    for name in STEP_PARTS[part]:
        col = f"timing_s/{name}"
        if col in table.columns:
            out += table[col].fill_null(0.0).to_numpy()
    return out


def baseline_design(table: pl.DataFrame) -> np.ndarray:
    """``(n_steps, 3)`` design ``[1, response_length/mean, response_length/max]``."""
    return np.column_stack(
        [np.ones(table.height)] + [table[c].to_numpy() for c in BASELINE_FEATURES]
    )


def step_baselines(tables: list[pl.DataFrame]) -> dict:
    """The naive rules for ``timing_s/step`` fitted on the calibration runs' steps:
    ``constant`` = the median step, ``linear`` = least squares (``numpy.linalg.lstsq``)
    on :func:`baseline_design`. Steps without the tags are left out. Under ``parts``, the
    same two rules for each of :data:`STEP_PARTS` (:func:`part_seconds`) on the same steps,
    so a per-part check of a held-out run needs nothing else of the calibration runs."""
    cols = [STEP_TAG, *BASELINE_FEATURES]
    pooled = pl.concat(
        [t.drop_nulls(cols).select(["step", *cols, *_part_tags(t)]) for t in tables],
        how="diagonal_relaxed",
    )
    X = baseline_design(pooled)  # (n_steps, 3)
    y = pooled[STEP_TAG].to_numpy()
    coef = np.linalg.lstsq(X, y, rcond=None)[0]
    parts = {}
    for part in STEP_PARTS:
        yp = part_seconds(pooled, part)  # (n_steps,)
        parts[part] = {
            "constant_s": float(np.median(yp)),
            "linear_coef": [float(c) for c in np.linalg.lstsq(X, yp, rcond=None)[0]],
        }
    return {
        "constant_s": float(np.median(y)),
        "linear_coef": [float(c) for c in coef],
        "linear_features": ["1", *BASELINE_FEATURES],
        "steps": int(len(y)),
        "parts": parts,
    }


def _part_tags(table: pl.DataFrame) -> list[str]:
    """The ``timing_s/*`` columns of :data:`STEP_PARTS` that ``table`` has."""
    tags = (f"timing_s/{n}" for names in STEP_PARTS.values() for n in names)
    return [c for c in tags if c in table.columns]
