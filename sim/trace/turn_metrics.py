"""Summary metrics of multi-turn runs, from the rollout, step and turns tables
(:mod:`sim.trace.turns`; docs/multi_turn.md). One function, :func:`turn_summary`, computes
them for a simulated or a real run alike.

- ``turns_mean``: model turns per rollout.
- ``tool_s_per_rollout``: seconds a rollout spends in tool calls (sandbox queue + run).
- ``tool_frac``: share of rollout wall time (``t_finish - t_submit``) spent in tool calls.
- ``tool_timeouts``: rollouts ended by a tool timeout.
- ``tool_idle_s``: GPU idle caused by tools, seconds per step: per worker, the time of the
  step's generation window (first submit to last finish) in which the worker holds no
  request (none queued or running) while at least one of its rollouts is in a tool call;
  summed over workers.
- ``straggler_tool_frac``: per step, the share of the last-finishing rollout's wall time
  spent in tool calls, averaged over steps (near 1: tool latency, not response length,
  sets the straggler).
- ``rank_spread_s``: barrier cost, seconds per step: the spread (max - min) over the
  data-parallel ranks (workers) of the time their last rollout of the step finished; the
  step's barrier makes every rank wait for the last.
"""

from __future__ import annotations

import numpy as np
import polars as pl

TURN_COLUMNS = (
    "turns_mean",
    "tool_s_per_rollout",
    "tool_frac",
    "tool_timeouts",
    "tool_idle_s",
    "straggler_tool_frac",
    "rank_spread_s",
)
"""Summary columns of a multi-turn run (module docstring)."""


def merge_intervals(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``(m, 2)`` disjoint sorted intervals covering the union of ``[start_i, end_i]``."""
    if len(start) == 0:
        return np.zeros((0, 2))
    order = np.argsort(start, kind="stable")
    s, e = (
        np.asarray(start, dtype=float)[order],
        np.maximum.accumulate(np.asarray(end, dtype=float)[order]),
    )
    new = np.concatenate(([True], s[1:] > e[:-1]))  # a gap before interval i
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return np.column_stack((s[first], e[last]))


def uncovered_s(a: np.ndarray, b: np.ndarray) -> float:
    """Seconds of the union ``a`` not covered by the union ``b`` (both from
    :func:`merge_intervals`)."""
    total = float((a[:, 1] - a[:, 0]).sum())
    for s, e in a:
        lo, hi = np.maximum(b[:, 0], s), np.minimum(b[:, 1], e)
        total -= float(np.clip(hi - lo, 0, None).sum())
    return total


def turn_summary(
    rollouts: pl.DataFrame, turns: pl.DataFrame, synchronous: bool = True
) -> dict[str, float]:
    """:data:`TURN_COLUMNS` of one run (``rollouts``: trace schema; ``turns``: the turns
    table of the same run; the per-rollout columns count the turns of the rollouts in
    ``rollouts``, ``tool_idle_s`` every turn, e.g. of groups dynamic sampling filtered
    out). ``tool_idle_s`` and ``rank_spread_s`` need a synchronous run
    (steps that do not overlap): NaN when ``synchronous`` is False. Raises nothing; NaN
    where a table is empty."""
    if rollouts.height == 0 or turns.height == 0:
        return dict.fromkeys(TURN_COLUMNS, float("nan"))
    keys = ["step", "prompt_id", "sample_idx"]
    # Every group_by keeps its input order: the float sums below then add in one order, so
    # a run's summary is the same to the last digit each time it is computed.
    tool_s = (pl.col("t_tool_end") - pl.col("t_tool_request")).fill_null(0.0)
    written = turns.join(rollouts.select(keys).unique(), on=keys, how="semi")
    per = written.group_by(keys, maintain_order=True).agg(
        pl.len().alias("n"), tool_s.sum().alias("tool_s")
    )
    dur = float((rollouts["t_finish"] - rollouts["t_submit"]).sum())
    n_steps = rollouts["step"].n_unique()
    idle = 0.0
    for (_step, _w), g in turns.group_by(["step", "worker"], maintain_order=True):
        busy = merge_intervals(g["t_submit"].to_numpy(), g["t_finish"].to_numpy())
        calls = g.filter(pl.col("t_tool_end").is_not_null())
        tools = merge_intervals(calls["t_tool_request"].to_numpy(), calls["t_tool_end"].to_numpy())
        idle += uncovered_s(tools, busy)
    tail = (
        rollouts.sort("t_finish")
        .group_by("step", maintain_order=True)
        .last()
        .join(per, on=keys)
        .select(pl.col("tool_s") / (pl.col("t_finish") - pl.col("t_submit")))
    )
    last = rollouts.group_by("step", "worker", maintain_order=True).agg(pl.col("t_finish").max())
    spread = last.group_by("step", maintain_order=True).agg(
        (pl.col("t_finish").max() - pl.col("t_finish").min()).alias("d")
    )
    return {
        "turns_mean": float(per["n"].mean()),
        "tool_s_per_rollout": float(per["tool_s"].sum()) / rollouts.height,
        "tool_frac": float(per["tool_s"].sum()) / dur if dur > 0 else float("nan"),
        "tool_timeouts": float((rollouts["finish_reason"] == "tool_timeout").sum()),
        "tool_idle_s": idle / n_steps if synchronous else float("nan"),
        "straggler_tool_frac": float(tail.to_series().mean()),
        "rank_spread_s": float(spread["d"].mean()) if synchronous else float("nan"),
    }
