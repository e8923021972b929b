"""What a study page opens with (:class:`Answer`) and the readers the answers share:
a study file read with an error naming the file and the field it lacks."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl


class AnswerError(ValueError):
    """A study file that cannot be read or lacks a field the answer needs (the message
    names the file and the field)."""


@dataclass(frozen=True)
class Answer:
    """What a study found, for the top of its page and the terminal."""

    question: str
    """The question the study answers, one line."""
    headline: str
    """The answer in a sentence or two, numbers written by :mod:`analysis.figures.numbers`."""
    table: pl.DataFrame
    """The short table: raw values, named as the study's files name them (formatted
    when shown)."""
    best: tuple[bool, ...] = ()
    """Per row of ``table``: marked as the best (empty: none marked)."""
    notes: tuple[str, ...] = field(default=())
    """Lines under the table (what a mark means, what was left out)."""


def read_table(path: Path) -> pl.DataFrame:
    """The CSV table at ``path``. Raises :class:`AnswerError` naming the file when it
    cannot be read."""
    try:
        return pl.read_csv(path, infer_schema_length=None)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise AnswerError(f"{path}: not a readable CSV table ({exc})") from None


def need_columns(df: pl.DataFrame, path: Path, *columns: str) -> None:
    """Raises :class:`AnswerError` naming ``path`` and the ``columns`` ``df`` lacks."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise AnswerError(f"{path}: no column {', '.join(repr(c) for c in missing)}")


def field_of(doc: dict, path: Path, *keys: str):
    """``doc[keys[0]][keys[1]]...``. Raises :class:`AnswerError` naming ``path`` and the
    dotted field when one is missing."""
    cur = doc
    for k in keys:
        if not isinstance(cur, dict) or k not in cur:
            raise AnswerError(f"{path}: no field {'.'.join(keys)!r}")
        cur = cur[k]
    return cur


def best_flags(values: list, lowest: bool = True) -> tuple[bool, ...]:
    """Rows holding the lowest (or highest) finite value of ``values``."""
    finite = [v for v in values if v is not None and v == v]
    if not finite:
        return tuple(False for _ in values)
    target = min(finite) if lowest else max(finite)
    return tuple(v == target for v in values)
