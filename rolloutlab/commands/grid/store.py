"""A grid's results as they finish: ``OUT/grid.jsonl``, append-only, one flushed line per
finished point, so a killed driver loses no finished point and ``--resume`` runs only the
missing ones.

Line 1 is the header ``{"grid": HASH, "command": ..., "points": N}``; ``HASH`` is the
sha256 of the grid's spec (every setting that decides its results, as canonical JSON), so a
folder of another grid is refused on ``--resume``. Each further line is one point:
``{"index", "point", "status", "error", "attempts", "rows", "dtypes"}`` (``rows``: the
point's table rows; non-finite floats written as ``{"$float": "nan"|"inf"|"-inf"}`` so the
file is strict JSON and the table reads back exactly). A last line cut short by a kill is
dropped on resume.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from rolloutlab.commands.grid.executor import Outcome
from rolloutlab.sim.trace.jsonl import append_durably

FILE = "grid.jsonl"
STATUS_COLUMNS = ("status", "error")
"""Columns every grid table ends with: ``status`` ``ok``/``failed``, ``error`` (null when ok)."""


class GridResumeError(ValueError):
    """``--resume`` on a folder that holds no grid or another grid; one line, exit 2."""


def spec_hash(spec: dict[str, Any]) -> str:
    """sha256 hex digest of ``spec`` as canonical JSON (sorted keys, ``str`` for values
    JSON cannot hold)."""
    text = json.dumps(spec, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _encode(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return {"$float": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
    return v


def _decode(v: Any) -> Any:
    if isinstance(v, dict) and set(v) == {"$float"}:
        return float(v["$float"])
    return v


def _dtype(name: str) -> Any:
    """A polars dtype from its ``str`` (``Int64``, ``Float64``, ``String``, ``Boolean``...)."""
    return getattr(pl, name, None) if name.isidentifier() else None


def _read(path: Path) -> tuple[dict | None, dict[int, dict], int]:
    """(header, records by index, byte length of the complete lines)."""
    header, records, good = None, {}, 0
    with open(path, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break  # cut short by a kill
            try:
                obj = json.loads(raw)
            except ValueError:
                break
            good += len(raw)
            if header is None:
                header = obj
            else:
                records[int(obj["index"])] = obj
    return header, records, good


class GridStore:
    """The results file of one grid in ``out_dir`` (module docstring). ``spec``: what
    decides the results; ``points``: the grid's points in grid order; ``earlier_specs``:
    the same grid as an earlier version spelled its spec (a setting renamed since), whose
    grid files resume as this grid's."""

    def __init__(
        self,
        out_dir: str | Path,
        command: str,
        spec: dict,
        points: Sequence[dict],
        earlier_specs: Sequence[dict] = (),
    ):
        self.path = Path(out_dir) / FILE
        self.command, self.points = command, list(points)
        self.hash = spec_hash({"command": command, "spec": spec, "points": self.points})
        self.hashes = {
            self.hash,
            *(
                spec_hash({"command": command, "spec": s, "points": self.points})
                for s in earlier_specs
            ),
        }
        self.done: dict[int, dict] = {}

    def check_resume(self) -> None:
        """Read the finished points of a grid to resume (nothing written). Raises
        :class:`GridResumeError` naming the folder when it holds no grid file or one of
        another grid (different spec hash)."""
        if not self.path.exists():
            raise GridResumeError(
                f"{self.path.parent}: --resume: no {FILE} here (no grid to resume)"
            )
        header, records, _ = _read(self.path)
        if not header or header.get("grid") not in self.hashes:
            other = (header or {}).get("grid", "none")
            raise GridResumeError(
                f"{self.path.parent}: --resume: holds another grid (spec {str(other)[:12]}, "
                f"this grid {self.hash[:12]}); same options as the first run, or another --out"
            )
        self.done = records

    def check_fresh(self) -> None:
        """Refuse to start a grid afresh over finished points (nothing written): raises
        :class:`GridResumeError` when the folder's grid file holds any finished point.
        A finished grid is never replaced by a rerun (an interrupted rerun would leave
        fewer rows than it had): ``--resume`` reuses it (nothing left to run when it is
        this grid), another ``--out`` keeps both. An unfinished grid: ``--resume`` runs
        only its missing points. No grid file, or one without a point: fine."""
        if not self.path.is_file():
            return
        header, records, _ = _read(self.path)
        if not header or not records:
            return
        n, total = len(records), int(header.get("points") or 0)
        same = header.get("grid") in self.hashes
        if n >= total:
            raise GridResumeError(
                f"{self.path}: holds a finished grid of {total} points"
                + (
                    "; --resume reuses it (nothing to rerun)"
                    if same
                    else " made with other options"
                )
                + "; choose another --out for a new grid (a finished grid is never replaced)"
            )
        if same:
            raise GridResumeError(
                f"{self.path}: holds {n} of {total} finished points of this grid (an "
                "interrupted run); pass --resume to run only the missing ones, or remove "
                "the folder to start over"
            )
        raise GridResumeError(
            f"{self.path}: holds {n} of {total} finished points of another, unfinished "
            "grid (other options); rerun that one with --resume, or choose another --out"
        )

    def open(self, resume: bool) -> None:
        """Start the file (a new grid: header only) or, with ``resume`` (after
        :meth:`check_resume`), drop a last line cut short and append from there."""
        if resume:
            _, _, good = _read(self.path)
            with open(self.path, "r+b") as f:
                f.truncate(good)
        else:
            self.done = {}
            header = {"grid": self.hash, "command": self.command, "points": len(self.points)}
            self.path.write_text(json.dumps(header) + "\n")

    def record(self, outcome: Outcome) -> None:
        """Append ``outcome`` (its value a polars DataFrame when ok) as one line, flushed
        and fsynced before returning."""
        df = outcome.value
        rec = {
            "index": outcome.index,
            "point": self.points[outcome.index],
            "status": outcome.status,
            "error": outcome.error,
            "attempts": outcome.attempts,
            "rows": [] if df is None else [[_encode(v) for v in r] for r in df.iter_rows()],
            "columns": [] if df is None else df.columns,
            "dtypes": [] if df is None else [str(t) for t in df.dtypes],
        }
        line = json.dumps(rec, allow_nan=False) + "\n"
        append_durably(self.path, line)
        self.done[outcome.index] = rec

    def table(self) -> pl.DataFrame:
        """Every recorded point in grid order: an ok point's rows with ``status`` "ok",
        a failed point as one row of its point's keys with ``status`` "failed" and
        ``error``; other columns null there. Columns: the first ok point's, then
        :data:`STATUS_COLUMNS`."""
        frames, columns = [], None
        for i in sorted(self.done):
            rec = self.done[i]
            if rec["status"] == "ok":
                schema = {c: _dtype(t) for c, t in zip(rec["columns"], rec["dtypes"])}
                rows = [[_decode(v) for v in r] for r in rec["rows"]]
                df = pl.DataFrame(rows, schema=schema, orient="row")
                columns = columns or df.columns
                df = df.with_columns(
                    pl.lit("ok").alias("status"), pl.lit(None, pl.String).alias("error")
                )
            else:
                df = pl.DataFrame([rec["point"]]).with_columns(
                    pl.lit("failed").alias("status"), pl.lit(rec["error"], pl.String).alias("error")
                )
            frames.append(df)
        if not frames:
            return pl.DataFrame(schema={"status": pl.String, "error": pl.String})
        out = pl.concat(frames, how="diagonal_relaxed")
        head = columns or [c for c in out.columns if c not in STATUS_COLUMNS]
        return out.select(*head, *STATUS_COLUMNS)
