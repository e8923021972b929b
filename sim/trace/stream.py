"""Rollout tables written to parquet in row groups as a run goes (bounded memory).

Life cycle: create with a path (or ``None`` to keep tables in memory), :meth:`add`
rollout-table frames (trace schema) as steps finish; every ``row_group_rows`` rows the
buffered frames become one parquet row group (``pyarrow.parquet.ParquetWriter``) and are
dropped; :meth:`close` flushes and returns the table (in memory) or ``None`` (on disk).
"""

from __future__ import annotations

import os

import polars as pl
import pyarrow.parquet as pq
from rolloutlab.sim.trace.schema import ROLLOUT_SCHEMA


class RolloutSink:
    """Collects rollout frames; streams them to ``path`` when given."""

    def __init__(self, path: str | os.PathLike | None = None, row_group_rows: int = 1 << 20):
        self.path, self.row_group_rows = path, row_group_rows
        self._frames: list[pl.DataFrame] = []
        self._buffered = 0
        self._writer: pq.ParquetWriter | None = None
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
        table = pl.concat(self._frames, how="vertical").to_arrow()
        if self._writer is None:
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
