"""A run directory's traces written as the run goes: JSONL appended and flushed every
learner step, parquet at the end, and the JSONL cut back to a checkpoint on ``--resume``.

The schema, validation and readers are :mod:`sim.trace.schema`; this module writes, and
reads back the plain JSONL logs kept beside the traces (:func:`read_rows`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import polars as pl
from rolloutlab.sim.trace.schema import concat, empty, read, validate, write_parquet


def read_rows(path: str | os.PathLike) -> list[dict]:
    """The JSON objects of a JSONL log (``learner.jsonl``, ``eval.jsonl``), one per non-blank
    line, in file order. Raises OSError when the file cannot be read and ValueError on a
    line that is not JSON (callers that tolerate a torn last line cut it first,
    :func:`truncate_jsonl`); the ValueError names the file and line."""
    rows = []
    for no, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                raise ValueError(f"{path}: line {no}: not JSON ({exc})") from None
    return rows


def append_durably(path: str | os.PathLike, text: str) -> None:
    """Append ``text`` to ``path`` (created if missing), flushed and fsynced before
    returning, so a run killed afterwards keeps it. Raises OSError as ``open``."""
    with open(path, "a") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


@dataclass
class TraceWriter:
    """Appends rollout and step rows to a run directory, one step at a time.

    Life cycle: create, call :meth:`append_step` once per finished learner step
    (rows are validated, appended to ``rollouts.jsonl`` / ``steps.jsonl`` and flushed
    to disk, so a run that dies keeps every finished step), then :meth:`close`, which
    writes ``rollouts.parquet`` and ``steps.parquet``. With ``stream=False`` rows are
    kept in memory and only the parquet files are written (the simulator's mode);
    :meth:`close` is still what writes them, also after an exception.
    """

    out_dir: Path
    stream: bool = True
    prefix: str = ""

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._rollouts: list[pl.DataFrame] = []
        self._steps: list[pl.DataFrame] = []

    def path(self, kind: str, suffix: str) -> Path:
        """``out_dir / f"{prefix}{kind}{suffix}"``."""
        return self.out_dir / f"{self.prefix}{kind}{suffix}"

    def append_step(self, rollouts: pl.DataFrame, step: pl.DataFrame) -> None:
        """Validate and append one step's rows (rollout rows, and its one step row)."""
        rollouts = validate(rollouts, "rollouts", "<rollouts of step>")
        step = validate(step, "steps", "<step row>")
        if self.stream:
            for kind, df in (("rollouts", rollouts), ("steps", step)):
                append_durably(self.path(kind, ".jsonl"), df.write_ndjson())
        else:
            self._rollouts.append(rollouts)
            self._steps.append(step)

    def close(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Write the parquet tables; return ``(rollouts, steps)``."""
        if self.stream:
            rollouts = (
                read(self.path("rollouts", ".jsonl"), "rollouts")
                if self.path("rollouts", ".jsonl").exists()
                else empty("rollouts")
            )
            steps = (
                read(self.path("steps", ".jsonl"), "steps")
                if self.path("steps", ".jsonl").exists()
                else empty("steps")
            )
        else:
            rollouts = concat(self._rollouts, "rollouts")
            steps = concat(self._steps, "steps")
        write_parquet(rollouts, self.path("rollouts", ".parquet"), "rollouts")
        write_parquet(steps, self.path("steps", ".parquet"), "steps")
        return rollouts, steps


def truncate_jsonl(path: str | os.PathLike, keep_steps: int) -> None:
    """Keep only rows with ``step < keep_steps`` in a JSONL trace (for ``--resume``).

    Rewrites the file atomically; a partial last line (a run killed mid-write) is
    dropped with the steps after the checkpoint.
    """
    path = Path(path)
    if not path.exists():
        return
    kept = []
    with open(path) as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # torn final line of a killed run: its step is redone
            if row.get("step", 0) < keep_steps:
                kept.append(line if line.endswith("\n") else line + "\n")
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        fh.writelines(kept)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
