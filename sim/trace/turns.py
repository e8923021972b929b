"""The turns table of multi-turn rollouts (``turns.parquet``): one row per model turn,
keyed by ``run_id, step, prompt_id, sample_idx, turn`` (the rollout table's keys plus the
turn), written next to ``rollouts.parquet`` when a run has multi-turn rollouts
(docs/multi_turn.md). Times are seconds from run start, as in :mod:`sim.trace.schema`;
the ``t_tool_*`` columns are null on a rollout's last turn (no tool call after it).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import polars as pl
from rolloutlab.sim.trace.schema import META_KEY, SCHEMA_VERSION, TraceError

TURN_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String,
    "step": pl.Int64,
    "prompt_id": pl.Int64,
    "sample_idx": pl.Int64,
    "turn": pl.Int64,  # 0-based
    "worker": pl.Int64,
    "context_tokens": pl.Int64,  # the turn's prompt: first prompt + earlier turns + tool outputs
    "prefill_tokens": pl.Int64,  # tokens prefilled on a cache miss (new tokens only when cached)
    "response_tokens": pl.Int64,
    "t_submit": pl.Float64,
    "t_first_token": pl.Float64,
    "t_finish": pl.Float64,
    "t_tool_request": pl.Float64,  # tool call asked for a sandbox (= t_finish)
    "t_tool_start": pl.Float64,  # got one
    "t_tool_end": pl.Float64,  # returned (or timed out)
    "finish_reason": pl.String,  # tool_call | stop | length | tool_timeout
}

TURN_FINISH_REASONS = ("tool_call", "stop", "length", "tool_timeout")


def turn_frame(
    run_id: str, step: int, prompt_ids: np.ndarray, G: int, rows: list[dict]
) -> pl.DataFrame:
    """Turns table of one step from :attr:`sim.engine.turns.TurnBatch.turn_rows`
    (``rollout`` = row-major ``(prompt, sample)`` index); ``prompt_ids`` is ``(n,)`` per
    rollout. Sorted by ``(prompt_id, sample_idx, turn)``."""
    if not rows:
        return pl.DataFrame(schema=TURN_SCHEMA)
    df = pl.DataFrame(rows, infer_schema_length=None)
    r = df["rollout"].to_numpy()
    df = df.with_columns(
        pl.lit(run_id).alias("run_id"),
        pl.lit(step, dtype=pl.Int64).alias("step"),
        pl.Series("prompt_id", np.asarray(prompt_ids, dtype=np.int64)[r]),
        pl.Series("sample_idx", (r % G).astype(np.int64)),
    )
    return df.select([pl.col(c).cast(t) for c, t in TURN_SCHEMA.items()]).sort(
        "prompt_id", "sample_idx", "turn"
    )


def validate_turns(df: pl.DataFrame, source: str = "<memory>") -> pl.DataFrame:
    """``df`` cast to :data:`TURN_SCHEMA`. Raises :class:`sim.trace.schema.TraceError`
    naming ``source``, the first bad row and column: a missing column, a negative count
    or time, an unknown finish reason, a turn finishing before its submit, a tool that
    returns before it starts."""
    missing = [c for c in TURN_SCHEMA if c not in df.columns]
    if missing:
        raise TraceError(f"{source}: turns table is missing column(s) {missing}")
    try:
        out = df.select([pl.col(c).cast(t, strict=True) for c, t in TURN_SCHEMA.items()])
    except Exception as exc:  # polars raises several types on a bad cast
        raise TraceError(f"{source}: turns table: {exc}") from None
    checks = [
        (c, out[c] < 0)
        for c, t in TURN_SCHEMA.items()
        if t in (pl.Int64, pl.Float64) and c != "step"
    ]
    checks += [
        ("finish_reason", ~out["finish_reason"].is_in(TURN_FINISH_REASONS)),
        ("t_finish", out["t_finish"] < out["t_submit"]),
        ("t_tool_end", out["t_tool_end"] < out["t_tool_start"]),
        ("t_tool_start", out["t_tool_start"] < out["t_tool_request"]),
    ]
    for col, mask in checks:
        idx = mask.fill_null(False).arg_true()
        if len(idx):
            raise TraceError(
                f"{source}: row {int(idx[0])}, column {col!r}: bad value {out[col][int(idx[0])]!r}"
            )
    return out


def write_turns(df: pl.DataFrame | list[pl.DataFrame], path: str | os.PathLike) -> None:
    """Validate and write a turns table (or the concatenation of a list of them) to
    parquet atomically (schema version in the metadata, as
    :func:`sim.trace.schema.write_parquet`). Raises TraceError."""
    import pyarrow.parquet as pq  # why: at call, as sim.trace.schema does

    path = Path(path)
    df = pl.concat(df) if isinstance(df, list) else df
    table = validate_turns(df, str(path)).to_arrow()
    meta = {**(table.schema.metadata or {}), META_KEY: str(SCHEMA_VERSION).encode()}
    table = table.replace_schema_metadata({**meta, b"rolloutlab.kind": b"turns"})
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
