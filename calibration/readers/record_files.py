"""Per-sample log files (JSONL, CSV, parquet) as ``(line, record)`` pairs, with every
unreadable file, line or byte turned into one :class:`GroupedDataError` naming the file
and line (used by :mod:`calibration.readers.grouped_records`)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from rolloutlab.sim.trace import strict_json


class GroupedDataError(ValueError):
    """Unusable grouped input; the message names the file, the line and the field."""


def records(path: Path) -> list[tuple[int, dict]]:
    """``(line, record)`` pairs of a JSONL, CSV or parquet file (parquet rows count from
    1, CSV rows from 2, after the header).

    Raises :class:`GroupedDataError` naming the file (and line) for a line that is not a
    JSON object, a parquet file that cannot be read (truncated, corrupt) or an unknown
    suffix."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        out = []
        with open(path, "rb") as fh:
            for no, line in _lines(fh, path):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise GroupedDataError(strict_json.jsonl_error(path, no, exc)) from None
                if not isinstance(rec, dict):
                    raise GroupedDataError(f"{path}: line {no}: expected a JSON object")
                out.append((no, rec))
        return out
    if suffix == ".csv":  # every cell a string; header is line 1
        try:
            df = pl.read_csv(path, infer_schema_length=0)
        except (pl.exceptions.PolarsError, OSError) as exc:  # bad quoting, not UTF-8, ...
            raise GroupedDataError(
                f"{path}: not a readable CSV file ({_first_line(exc)})"
            ) from None
        return [
            (i + 2, {k: _csv_cell(v) for k, v in r.items()})
            for i, r in enumerate(df.iter_rows(named=True))
        ]
    if suffix == ".parquet":
        try:
            df = pl.read_parquet(path)
        except (pl.exceptions.PolarsError, OSError) as exc:  # truncated, corrupt, not parquet
            raise GroupedDataError(
                f"{path}: not a readable parquet file ({_first_line(exc)})"
            ) from None
        return [(i + 1, r) for i, r in enumerate(df.iter_rows(named=True))]
    raise GroupedDataError(f"{path}: unknown format (expected .jsonl, .csv or .parquet)")


def _first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (polars' run on for a page), or its type."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _lines(fh, path):
    """``(line number, decoded line)`` of a file opened in binary mode, decoded line by
    line (so the number is exact); GroupedDataError naming the file and line at the first
    one that is not UTF-8."""
    for no, raw in enumerate(fh, 1):
        try:
            yield no, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GroupedDataError(f"{path}: line {no}: not UTF-8 text ({exc.reason})") from None


def _csv_cell(v: str | None):
    """A CSV cell: JSON (a list ``[412, 95]``, a number, true/false) or a float
    (``nan``, ``inf``) decoded, anything else kept as text (so a response text that is
    just a number, ``"42"``, reads as a length in CSV; use JSONL for such texts)."""
    if v is None:
        return None
    try:
        return json.loads(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v
