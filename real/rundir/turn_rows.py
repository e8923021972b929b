"""The real runs' turns table (multi-turn tasks, :mod:`real.tasks.lookup`).

Each step appends one row per model turn of its rollouts to ``turns.jsonl`` (resume
truncates it with the other JSONL logs); at the end of a run the whole file is written as
``turns.parquet`` with the simulator's schema (:data:`sim.trace.turns.TURN_SCHEMA`), so
``rolloutlab calibrate turns`` fits it as it fits a simulated one.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from rolloutlab.sim.trace import strict_json
from rolloutlab.sim.trace.jsonl import append_durably
from rolloutlab.sim.trace.turns import TURN_SCHEMA, write_turns


def append_turns(out: Path, run_id: str, step: int, G: int, results: list, first: int) -> None:
    """Append the turns of ``results`` (``n * G`` in group order; group ``p`` is prompt
    ``first + p``) to ``out/turns.jsonl``; nothing for one-turn rollouts (no ``turns``)."""
    rows = [
        {
            "run_id": run_id,
            "step": step,
            "prompt_id": first + r.request_id // G,
            "sample_idx": r.request_id % G,
            "worker": r.worker,
            **turn,
        }
        for r in results
        for turn in r.turns
    ]
    if rows:
        append_durably(out / "turns.jsonl", "".join(strict_json.dumps(r) + "\n" for r in rows))


def write_turns_parquet(out: Path) -> None:
    """Write ``out/turns.parquet`` from ``out/turns.jsonl`` when the run had turns.

    Raises: :class:`sim.trace.schema.TraceError` on a bad row (a bug, not bad input)."""
    src = out / "turns.jsonl"
    if src.exists() and src.stat().st_size:
        df = pl.read_ndjson(src, schema=TURN_SCHEMA)
        write_turns(df.sort("step", "prompt_id", "sample_idx", "turn"), out / "turns.parquet")
