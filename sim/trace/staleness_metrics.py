"""Staleness metrics of rollout traces: which rows a learner consumed, their staleness,
and the length bias of discarding stale or aborted rollouts (docs/metrics.md).

Part of :mod:`sim.trace.metrics`, which re-exports every name here; import them from there.
Rows follow the trace schema (:mod:`sim.trace.schema`); versions are learner versions.
"""

from __future__ import annotations

import numpy as np
import polars as pl


def consumed(rollouts: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame | pl.LazyFrame:
    """The rows a learner trained on: every row but ``finish_reason == "abort"`` (a rollout
    dropped as too stale or aborted by over-sampling, see :mod:`sim.pipelines.async_pipeline`);
    a lazy frame stays lazy."""
    return rollouts.filter(pl.col("finish_reason") != "abort")


def staleness(rollouts: pl.DataFrame) -> np.ndarray:
    """Per-row staleness ``learner_version - policy_version`` (versions), shape ``(rows,)``."""
    return (rollouts["learner_version"] - rollouts["policy_version"]).to_numpy()


def staleness_histogram(rollouts: pl.DataFrame) -> pl.DataFrame:
    """Per-step staleness histogram of the consumed rollouts: columns ``step, staleness,
    rollouts`` (count), sorted; absent combinations have no row."""
    df = consumed(rollouts).with_columns(
        (pl.col("learner_version") - pl.col("policy_version")).alias("staleness")
    )
    return (
        df.group_by("step", "staleness")
        .agg(pl.len().cast(pl.Int64).alias("rollouts"))
        .sort("step", "staleness")
    )


def discarded_counts(rollouts: pl.DataFrame, max_staleness: int = 0) -> tuple[int, int]:
    """``(dropped, aborted)``: ``"abort"`` rows staler than ``max_staleness`` (dropped as
    too stale) and the others (aborted by an over-sampling tail abort)."""
    ab = rollouts.filter(pl.col("finish_reason") == "abort")
    n_drop = int((staleness(ab) > max_staleness).sum()) if ab.height else 0
    return n_drop, ab.height - n_drop


def drop_bias(rollouts: pl.DataFrame, max_staleness: int = 0, n_bins: int = 4) -> dict:
    """Length bias of discarding rollouts: consumed ones against *all* generated ones.

    Generated = consumed + dropped (stale) + aborted, an aborted one counted at its
    would-be length (``would_be_response_tokens``, what it would have had if generated
    to the end; the simulator knows it). Rows without a would-be length (real traces,
    version 1-2 files) count only if generated to the end (consumed or dropped), as
    before: their truncated length says nothing about the one they would have had.

    Returns ``len_generated_mean``, ``len_consumed_mean`` (tokens), their ratio
    ``len_consumed_over_generated`` (< 1: long responses trained on less often than
    generated) and ``drop_rate_by_length_bin``: the discarded (dropped or aborted)
    fraction in each of ``n_bins`` equal-count bins of (would-be) length, shortest
    first. NaN when empty.
    """
    ab = (rollouts["finish_reason"] == "abort").to_numpy()
    dropped = ab & (staleness(rollouts) > max_staleness)
    if "would_be_response_tokens" in rollouts.columns:
        would_be = rollouts["would_be_response_tokens"]
        known = would_be.is_not_null().to_numpy()
        full_len = would_be.fill_null(rollouts["response_tokens"]).to_numpy()
    else:
        known = np.zeros(rollouts.height, dtype=bool)
        full_len = rollouts["response_tokens"].to_numpy()
    full = ~ab | dropped | known
    lengths = full_len[full].astype(float)  # (generated,)
    drop = ab[full]
    if lengths.size == 0:
        return {
            "len_generated_mean": float("nan"),
            "len_consumed_mean": float("nan"),
            "len_consumed_over_generated": float("nan"),
            "drop_rate_by_length_bin": [],
        }
    order = np.argsort(lengths, kind="stable")
    rates = [
        float(drop[b].mean()) if b.size else float("nan") for b in np.array_split(order, n_bins)
    ]
    gen_mean = float(lengths.mean())
    cons_mean = float(lengths[~drop].mean()) if (~drop).any() else float("nan")
    return {
        "len_generated_mean": gen_mean,
        "len_consumed_mean": cons_mean,
        "len_consumed_over_generated": cons_mean / gen_mean if gen_mean > 0 else float("nan"),
        "drop_rate_by_length_bin": rates,
    }
