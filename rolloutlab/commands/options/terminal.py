"""What a command prints on the terminal: its tables in one style (:func:`echo_table`), a
run's one-line summary (:func:`format_summary`) and the progress bar around a long run
(:func:`progress`)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from rolloutlab.commands.options.common import fail
from rolloutlab.sim.trace.progress import progress_bar

if TYPE_CHECKING:
    import polars as pl


@contextmanager
def progress(total: int, desc: str, unit: str) -> Iterator[Any]:
    """A transient bar on a terminal, plain lines with the elapsed time otherwise
    (:func:`sim.trace.progress.progress_bar`), around a long run; a ValueError or RuntimeError
    raised inside goes through :func:`fail` (one line; exit 2 or 1)."""
    bar = progress_bar(total=total, desc=desc, unit=unit)
    try:
        yield bar
    except (ValueError, RuntimeError) as exc:
        fail(exc)
    finally:
        bar.close()


NO_WRAP = 65_535
"""The widest line polars draws: a block is rendered at this width so no cell is wrapped
or cut, and :func:`echo_table` splits columns instead."""
TERMINAL_COLUMNS = 100
"""Width a table is fitted to when the output is not a terminal (``$COLUMNS`` wins)."""
KEY_COLUMNS = 3
"""At most this many leading text columns (controller, pipeline, run ...) name a row and
are repeated in every block of a wide table."""


def _render(df: pl.DataFrame) -> str:
    return str(df)


def _blocks(df: pl.DataFrame, width: int) -> list[pl.DataFrame]:
    """``df``'s columns in consecutive blocks whose rendering fits ``width`` characters,
    each led by the row keys (the leading text columns, at most :data:`KEY_COLUMNS`); a
    column too wide for any block gets one of its own."""
    import polars as pl  # why: --help needs no polars (0.3 s)

    keys: list[str] = []
    for name, dtype in df.schema.items():
        if dtype not in (pl.String, pl.Categorical) or len(keys) == KEY_COLUMNS:
            break
        keys.append(name)
    rest = [c for c in df.columns if c not in keys]
    if not rest or len(_render(df).splitlines()[0]) <= width:
        return [df]
    blocks: list[pl.DataFrame] = []
    block: list[str] = []
    for c in rest:
        wide = block and len(_render(df.select(*keys, *block, c)).splitlines()[0]) > width
        if wide:
            blocks.append(df.select(*keys, *block))
            block = []
        block.append(c)
    blocks.append(df.select(*keys, *block))
    return blocks


def echo_table(*tables: pl.DataFrame, rows: int = -1, precision: int = 3) -> None:
    """Print each table in the one style of every command: polars' box, up to ``rows`` rows
    (-1: all), every column, floats to ``precision`` decimals, no shape line, no column
    types, strings in full (a controller spec such as ``sagc:tau=1.6,delta=0.2`` is never
    cut). A table wider than the terminal (``$COLUMNS``, else
    :data:`TERMINAL_COLUMNS` when not a terminal) is printed as consecutive column blocks
    that each fit it and repeat the row keys (:func:`_blocks`)."""
    import polars as pl  # why: --help needs no polars (0.3 s)

    width = shutil.get_terminal_size((TERMINAL_COLUMNS, 24)).columns
    with pl.Config(
        tbl_rows=rows,
        tbl_cols=-1,
        float_precision=precision,
        tbl_hide_dataframe_shape=True,
        tbl_hide_column_data_types=True,
        tbl_width_chars=NO_WRAP,
        fmt_str_lengths=1000,
    ):
        for df in tables:
            for block in _blocks(df, width):
                click.echo(_render(block))


def format_summary(summary: dict) -> str:
    """``k=v`` pairs on one line, floats to 4 significant digits (a real run's summary)."""
    return " ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items()
    )
