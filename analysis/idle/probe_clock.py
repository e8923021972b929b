"""``compare idle --clock probe``: the CPU clock corrected by a per-step machine-speed probe.

On a shared machine the process CPU time of fixed work drifts with the other processes'
load (docs/multi_turn.md "Predicted against measured"), so ``--clock cpu`` leaves the
drift in. The real runners time fixed workloads once a step (``timing_s/probe_model`` and
``timing_s/probe`` in ``learner.jsonl``, :mod:`rolloutlab.real.runners.probe`); this clock
divides each step's
generation CPU seconds by the step's speed factor ``f = probe / median(probe over the
fit steps)``, giving "reference-speed seconds": the CPU time the step would have taken at
the fit steps' median machine speed.

The tool latencies a multi-turn task injects are sleeps on the wall clock: a sleep does
not slow with load, so they are not scaled. Each step's timeline is split into busy
stretches (some turn generating: the union of the turns' ``[t_submit, t_finish]``) and
idle ones (every unfinished rollout parked on a tool); busy stretches are scaled by
``cpu_gen / busy_wall / f``, idle ones keep their wall length, and every tool call keeps its
wall latency from its (mapped) request. An approximation: at reference speed the calls
would return at other points of the schedule, which only a re-simulation knows. A
single-turn run has no idle stretch: its map is the CPU clock's divided by ``f``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import polars as pl
from rolloutlab.analysis.inputs.run_input import (
    RunData,
    RunInputError,
    cpu_phases,
    on_cpu_clock,
    rescaled_rollouts,
)
from rolloutlab.sim.trace.jsonl import read_rows

PROBE_FIELD = "timing_s/probe_model"
"""The ``learner.jsonl`` field the clock uses: each step's CPU seconds of fixed forwards of
the policy model (real/runners/probe.py). It tracks the drift of the runs' CPU time better
than the small matmul probe ``timing_s/probe`` (docs/multi_turn.md)."""


def probe_times(run_dir: str | Path, n_steps: int, field: str = PROBE_FIELD) -> np.ndarray:
    """``(n_steps,)`` probe CPU seconds per step: ``field`` of the run's ``learner.jsonl``.

    Raises :class:`RunInputError` naming the file and :data:`PROBE_FIELD` when the file is
    missing, has another number of rows than the run has steps, or a row lacks the field or
    holds a value that is not a positive finite number."""
    path = Path(run_dir) / "learner.jsonl"
    rows = read_rows(path) if path.exists() else []
    vals = [r.get(field) for r in rows]
    ok = len(rows) == n_steps and all(
        isinstance(v, int | float) and np.isfinite(v) and v > 0 for v in vals
    )
    if not ok:
        raise RunInputError(
            f"{path}: field {field} missing or not a positive number on some step (a "
            "run from before the probe was recorded): use --clock cpu or rerun it"
        )
    return np.array(vals, float)


def speed_factors(probe: np.ndarray, fit_steps: int) -> np.ndarray:
    """``(n,)`` each step's slowdown ``probe / median(probe[:fit_steps])`` (1 = the fit
    steps' median speed, 2 = fixed work took twice the CPU time). ``probe``: ``(n,)``
    positive seconds; ``fit_steps`` is clipped to ``1..n``."""
    k = min(max(int(fit_steps), 1), len(probe))
    return probe / float(np.median(probe[:k]))


def busy_map(
    t0: float, starts: np.ndarray, ends: np.ndarray, rate: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """The piecewise-linear time map of one step: busy stretches (the union of the
    intervals ``[starts[i], ends[i]]``, ``(m,)`` s on the run clock) advance at ``rate``,
    the rest at 1, from ``t0`` (mapped to itself).

    Returns ``(knots, mapped, idle_s)``: the map is ``np.interp(t, knots, mapped)`` for
    ``t >= t0`` inside the step, ``idle_s`` the wall seconds not busy between ``t0`` and the
    last end."""
    order = np.argsort(starts, kind="stable")
    knots, mapped, idle = [t0], [t0], 0.0
    merged: list[tuple[float, float]] = []  # busy stretches, overlapping ones joined
    for s, e in zip(starts[order], ends[order], strict=True):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((max(s, t0), max(e, t0)))
    for s, e in merged:
        gap = s - knots[-1]
        idle += gap
        knots += [s, e]
        mapped += [mapped[-1] + gap, mapped[-1] + gap + (e - s) * rate]
    return np.array(knots), np.array(mapped), idle


def on_probe_clock(run: RunData, fit_steps: int | None = None, field: str = PROBE_FIELD) -> RunData:
    """``run`` on the probe clock (module docstring). ``fit_steps``: the steps whose median
    probe is the reference speed (default: the first half, as ``compare idle``); ``field``:
    the ``learner.jsonl`` field timed (another fixed-work timing, e.g. ``cpu_sync_s``).

    Raises :class:`RunInputError` naming ``learner.jsonl`` and the field when the probe or
    CPU fields are missing, and as :func:`analysis.inputs.run_input.on_cpu_clock` for a run whose
    generation is not on this process's CPU."""
    n = run.steps.height
    probe = probe_times(run.path, n, field)
    f = speed_factors(probe, n // 2 if fit_steps is None else fit_steps)
    on_cpu_clock(run)  # the same checks: engine on this CPU, CPU fields present
    gen_cpu = cpu_phases(run.path, n)["cpu_gen_s"]
    gen_wall = run.steps["gen_time"].to_numpy()
    if run.turns is None:  # all busy: the CPU clock's map over f
        rollouts, steps = rescaled_rollouts(run, gen_cpu / gen_wall / f, gen_cpu / f)
        return dataclasses.replace(run, rollouts=rollouts, steps=steps)
    return _turns_on_probe_clock(run, gen_cpu, gen_wall, f)


def _turns_on_probe_clock(
    run: RunData, gen_cpu: np.ndarray, gen_wall: np.ndarray, f: np.ndarray
) -> RunData:
    """Multi-turn: busy stretches scaled, idle ones and tool latencies kept (module docstring)."""
    assert run.turns is not None
    roll_parts, turn_parts, gen_time = [], [], gen_wall.copy()
    for i, step in enumerate(run.steps["step"].to_list()):
        ro = run.rollouts.filter(pl.col("step") == step)
        tu = run.turns.filter(pl.col("step") == step)
        if ro.height == 0:
            roll_parts.append(ro)
            turn_parts.append(tu)
            continue
        t0 = float(ro["t_submit"].min())
        starts, ends = tu["t_submit"].to_numpy(), tu["t_finish"].to_numpy()
        _, _, idle = busy_map(t0, starts, ends, 1.0)
        busy = max(gen_wall[i] - idle, 1e-9)
        knots, mapped, _ = busy_map(t0, starts, ends, gen_cpu[i] / busy / f[i])
        gen_time[i] = gen_cpu[i] / f[i] + idle

        def m(c: str, frame: pl.DataFrame, k=knots, v=mapped) -> pl.Series:
            x = frame[c].to_numpy().astype(float)  # a null (no tool call) stays null
            return pl.Series(c, np.interp(x, k, v), dtype=pl.Float64, nan_to_null=True)

        roll_parts.append(
            ro.with_columns(m(c, ro) for c in ("t_submit", "t_first_token", "t_finish"))
        )
        req = m("t_tool_request", tu)
        turn_parts.append(
            tu.with_columns(
                m("t_submit", tu),
                m("t_first_token", tu),
                m("t_finish", tu),
                req,
                (req + (tu["t_tool_start"] - tu["t_tool_request"])).alias("t_tool_start"),
                (req + (tu["t_tool_end"] - tu["t_tool_request"])).alias("t_tool_end"),
            )
        )
    steps = run.steps.with_columns(pl.Series("gen_time", gen_time))
    return dataclasses.replace(
        run,
        rollouts=pl.concat(roll_parts),
        steps=steps,
        turns=pl.concat(turn_parts),
    )
