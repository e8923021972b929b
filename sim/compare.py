"""Run several controllers on one scenario and one prompt stream, and summarise.

Every controller sees the same seed, hence the same prompts and the same first
samples of each prompt (:mod:`sim.pipeline`); the summary row of each run is
:func:`sim.metrics.run_summary` of its traces.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

import polars as pl

from sim.controllers import parse_controller
from sim.fastpath import run_sync_fast
from sim.metrics import DEFAULT_TAU, run_summary
from sim.pipeline import RunConfig, run_sync
from sim.scenario import Scenario

SUMMARY_COLUMNS = ("controller", "steps", "wall_clock_s", "gen_time_s", "slot_idle_frac",
                   "straggler_rate", "mean_G", "rollouts", "tokens_per_s", "device_idle_s",
                   "train_time_s", "sync_time_s", "response_tokens")


def sagc_defaults(scenario: Scenario) -> dict[str, Any]:
    """SAGC keyword defaults a scenario suggests (``tau``, ``delta``), if any."""
    return {k: scenario.defaults[k] for k in ("tau", "delta") if k in scenario.defaults}


def run_comparison(scenario: Scenario, specs: Sequence[str], cfg: RunConfig,
                   on_step: Callable[[str, int, int], None] | None = None,
                   engine: str = "simpy") -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Simulate each controller spec (``static:G``, ``sagc[:k=v]``) for ``cfg.steps`` steps
    on the SimPy engine or the vectorised fast path (``engine="fast"``, no KV pressure).

    Returns ``(summary, rollouts, steps)``: ``summary`` has one row per spec with
    :data:`SUMMARY_COLUMNS`; the trace tables hold every run, ``run_id`` = the spec.
    Raises ValueError on a bad or duplicated spec.
    """
    if len(set(specs)) != len(specs) or not specs:
        raise ValueError(f"controllers: need distinct specs, got {list(specs)}")
    tau = float(scenario.defaults.get("tau", DEFAULT_TAU))
    controllers = [parse_controller(s, seed=cfg.seed, **sagc_defaults(scenario)) for s in specs]
    rows, all_rollouts, all_steps = [], [], []
    for spec, ctl in zip(specs, controllers):
        hook = (lambda t, G, _s=spec: on_step(_s, t, G)) if on_step else None
        run = run_sync_fast if engine == "fast" else run_sync
        rollouts, steps = run(scenario, ctl, replace(cfg, run_id=spec), on_step=hook)
        rows.append({"controller": spec, **run_summary(rollouts, steps, tau)})
        all_rollouts.append(rollouts)
        all_steps.append(steps)
    summary = pl.DataFrame(rows).select(SUMMARY_COLUMNS)
    return summary, pl.concat(all_rollouts), pl.concat(all_steps)
