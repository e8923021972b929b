"""Synthetic grouped traces shared by the per-sample tests."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl
from rolloutlab.calibration.readers.grouped import GroupedTrace
from rolloutlab.sim.models.lengths import LognormalLengths


def rows_trace(rows: list[dict], source: str) -> GroupedTrace:
    """A :class:`GroupedTrace` in tokens of ``rows`` (dicts of ``step, prompt, sample_idx,
    length``), read from ``source``: line numbers in row order, no cap, reward or prompt
    length, nothing censored."""
    df = pl.DataFrame(rows).with_columns(
        pl.lit(source).alias("source"),
        (pl.int_range(pl.len()) + 1).alias("line"),
        pl.lit(False).alias("censored"),
        pl.lit(None, pl.Int64).alias("cap"),
        pl.lit(None, pl.Float64).alias("reward"),
        pl.lit(None, pl.Int64).alias("prompt_tokens"),
    )
    return GroupedTrace(df, "tokens")


def lognormal_trace(
    model_at: Callable[[int], LognormalLengths],
    steps: int,
    B: int,
    G: int,
    rng: np.random.Generator,
    source: str,
) -> GroupedTrace:
    """A per-sample trace of ``steps`` steps of ``B`` prompts x ``G`` samples, step ``t``
    drawn from ``model_at(t)`` with ``rng``; no cap, reward or prompt length."""
    rows = []
    for t in range(steps):
        x = model_at(t).sample(rng, B, G)
        rows += [
            {"step": t, "prompt": f"{t}-{i}", "sample_idx": j, "length": int(x[i, j])}
            for i in range(B)
            for j in range(G)
        ]
    return rows_trace(rows, source)


def drifting_trace(seed: int, steps: int = 160, B: int = 16, G: int = 4) -> GroupedTrace:
    """A run whose within-group spread of log length grows from 0.05 to 1 (a tail that
    grows as the policy learns), so the run-average law is wrong at its ends."""
    return lognormal_trace(
        lambda t: LognormalLengths(4.0, 0.2, 0.05 + 0.95 * t / (steps - 1), 10**6),
        steps,
        B,
        G,
        np.random.default_rng(seed),
        f"run{seed}",
    )
