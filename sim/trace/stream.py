"""Rollout tables written to parquet in row groups as a run goes (bounded memory).

Life cycle: create with a path (or ``None`` to keep tables in memory), :meth:`RolloutSink.add`
rollout-table frames (trace schema) as steps finish; every ``row_group_rows`` rows the
buffered frames are validated (:func:`sim.trace.schema.validate`), become one parquet row
group (``pyarrow.parquet.ParquetWriter``) and are dropped; :meth:`RolloutSink.close`
flushes and returns the table (in memory) or ``None`` (on disk). :func:`merge_parquet`
joins several such files into one, a row group at a time. Files carry the schema
version as :func:`sim.trace.schema.write_parquet` writes it; read them back lazily with
:func:`polars.scan_parquet` (:mod:`sim.trace.scan`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl
from rolloutlab.sim.trace.schema import ROLLOUT_SCHEMA, validate, with_schema_metadata


class RolloutSink:
    """Collects rollout frames; streams them to ``path`` when given.

    Raises :class:`sim.trace.schema.TraceError` (from :meth:`add` or :meth:`close`) on an
    invalid row; the file then holds the row groups written before it."""

    def __init__(self, path: str | os.PathLike | None = None, row_group_rows: int = 1 << 18):
        self.path, self.row_group_rows = path, row_group_rows
        self._frames: list[pl.DataFrame] = []
        self._buffered = 0
        self._writer: Any = None  # pyarrow.parquet.ParquetWriter once opened
        self.rows = 0

    def add(self, frame: pl.DataFrame) -> None:
        """Append rows (columns in :data:`sim.trace.schema.ROLLOUT_SCHEMA` order and types)."""
        self._frames.append(frame)
        self._buffered += frame.height
        self.rows += frame.height
        if self.path is not None and self._buffered >= self.row_group_rows:
            self._flush()

    def _flush(self) -> None:
        if not self._frames:
            return
        frame = pl.concat(self._frames, how="vertical")
        table = with_schema_metadata(
            validate(frame, "rollouts", str(self.path)).to_arrow(), "rollouts"
        )
        if self._writer is None:
            import pyarrow.parquet as pq  # why: at call, not import (~55 ms of every CLI start)

            self._writer = pq.ParquetWriter(self.path, table.schema)
        self._writer.write_table(table, row_group_size=self.row_group_rows)
        self._frames, self._buffered = [], 0

    def close(self) -> pl.DataFrame | None:
        """Flush and close; the whole table when kept in memory, else ``None``."""
        if self.path is None:
            return (
                pl.concat(self._frames, how="vertical")
                if self._frames
                else pl.DataFrame(schema=ROLLOUT_SCHEMA)
            )
        if self._writer is None and not self._frames:
            self._frames.append(pl.DataFrame(schema=ROLLOUT_SCHEMA))
        self._flush()
        assert self._writer is not None  # _flush opened it: there was a frame
        self._writer.close()
        return None


class ColumnSpool:
    """Stands in for a runner's list of per-step rollout column dicts (``append``) and
    hands every ``rows`` rows to ``sink`` as one frame (``to_frame(dicts)``, e.g.
    :func:`sim.pipelines.sync.columns_to_rollouts`), so a run holds a few steps' rows, not
    all of them. :meth:`close` flushes and closes the sink."""

    def __init__(
        self, sink: RolloutSink, to_frame: Callable[[list], pl.DataFrame], rows: int = 1 << 17
    ):
        self.sink, self.to_frame, self.rows = sink, to_frame, rows
        self._dicts: list[dict] = []
        self._n = 0

    def append(self, columns: dict) -> None:
        """Add one block of rollout columns (arrays of equal length)."""
        self._dicts.append(columns)
        self._n += len(next(iter(columns.values())))
        if self._n >= self.rows:
            self._flush()

    def _flush(self) -> None:
        if self._dicts:
            self.sink.add(self.to_frame(self._dicts))
        self._dicts, self._n = [], 0

    def close(self) -> pl.DataFrame | None:
        """Flush what is left; :meth:`RolloutSink.close`'s value."""
        self._flush()
        return self.sink.close()


def merge_parquet(parts: Sequence[str | os.PathLike], path: str | os.PathLike) -> None:
    """Write the rows of ``parts`` (parquet files of one schema, e.g. :class:`RolloutSink`
    files), in order, to ``path``: one row group in memory at a time, atomically (a temp
    file renamed). Raises ValueError when ``parts`` is empty."""
    if not parts:
        raise ValueError("merge_parquet: no part files")
    import pyarrow.parquet as pq  # why: as in RolloutSink

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    first = pq.ParquetFile(parts[0])
    with pq.ParquetWriter(tmp, first.schema_arrow) as writer:
        for part in parts:
            f = pq.ParquetFile(part)
            for i in range(f.num_row_groups):
                writer.write_table(f.read_row_group(i))
    os.replace(tmp, path)


@contextmanager
def streamed_rollouts(out_dir: str | os.PathLike) -> Iterator[Path]:
    """A parts folder in ``out_dir`` for runs to stream their rollouts into (one
    ``*.parquet`` each, run order = name order); on a normal exit the parts are merged
    into ``out_dir/rollouts.parquet`` (:func:`merge_parquet`), and the folder is removed
    either way."""
    parts = Path(out_dir) / ".rollout-parts"
    parts.mkdir(exist_ok=True)
    try:
        yield parts
        merge_parquet(sorted(parts.glob("*.parquet")), Path(out_dir) / "rollouts.parquet")
    finally:
        shutil.rmtree(parts, ignore_errors=True)
