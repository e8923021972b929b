"""A test-only stand-in for ``rolloutlab.sim.learning`` (owned by another branch): used
only when the real module is not importable, so these tests run on this branch alone and
on the real module once it is merged. Functions follow the shared interface
(wave_spec: ``time_to_target``, ``final_reward``)."""

from __future__ import annotations

import importlib
import math
import sys
import types

import polars as pl


def _time_to_target(steps: pl.DataFrame, target: float, window: int = 10) -> float | None:
    df = steps.sort("t_end").with_columns(
        pl.col("reward_mean").rolling_mean(window, min_samples=window).alias("_trail")
    )
    hit = df.filter(pl.col("_trail") >= target)
    return None if hit.is_empty() else float(hit["t_end"][0])


def _final_reward(steps: pl.DataFrame, frac: float = 0.1) -> float:
    df = steps.sort("t_end")
    return float(df.tail(math.ceil(frac * df.height))["reward_mean"].mean())


def install_if_missing(monkeypatch) -> None:
    """Put the stand-in into ``sys.modules`` when ``rolloutlab.sim.learning`` is absent."""
    try:
        importlib.import_module("rolloutlab.sim.learning")
    except ImportError:
        mod = types.ModuleType("rolloutlab.sim.learning")
        mod.time_to_target, mod.final_reward = _time_to_target, _final_reward
        monkeypatch.setitem(sys.modules, "rolloutlab.sim.learning", mod)
