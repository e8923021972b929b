"""Read verl's console log (the trainer's stdout) into the step table of
:mod:`calibration.readers.verl_tb`.

verl's console logger prints one line per training step, ``step:N - key:value - key:value
...`` (``(main_task pid=...) step:1 - timing/gen:23.133 - response_length/mean:313.824
...``), with terminal colour codes around the prefix. Other lines (the config dump,
warnings) are skipped. Lines of one step merge (verl prints a step's validation scores on a
line of their own, ``step:0 - test_score/openai/gsm8k:0.521``). The table has one row per step: ``step`` (int64) and one Float64
column per metric, null where a step lacks it.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
from rolloutlab.calibration.readers.verl_tb import VerlLogError

ANSI = re.compile(r"\x1b\[[0-9;]*m")
"""Terminal colour codes."""

STEP_LINE = re.compile(r"(?:^|\s)step:(\d+) - (.*)$")
"""A step line: the step and its `` - ``-separated ``key:value`` fields."""


def read_console_log(path: str | Path) -> pl.DataFrame:
    """The step table of one console log (module docstring). Raises
    :class:`calibration.readers.verl_tb.VerlLogError` naming the file, line and field on a
    value that is not a number or a field without ``key:value``, a metric logged twice at
    one step, or a log without a step line."""
    path = Path(path)
    rows: dict[int, dict[str, float]] = {}
    where: dict[tuple[int, str], int] = {}
    with path.open(encoding="utf-8", errors="replace") as fh:
        for lineno, raw in enumerate(fh, 1):
            m = STEP_LINE.search(ANSI.sub("", raw.rstrip("\n")))
            if m is None:
                continue
            step = int(m.group(1))
            row = rows.setdefault(step, {})
            for field in m.group(2).split(" - "):
                key, sep, value = field.strip().rpartition(":")
                if not sep or not key:
                    raise VerlLogError(f"{path}: line {lineno}: field {field!r} is not key:value")
                if key in row:
                    raise VerlLogError(
                        f"{path}: line {lineno}: field {key} of step {step} logged again "
                        f"(first on line {where[(step, key)]})"
                    )
                try:
                    row[key] = float(value)
                except ValueError:
                    raise VerlLogError(
                        f"{path}: line {lineno}: field {key}: {value!r} is not a number"
                    ) from None
                where[(step, key)] = lineno
    if not rows:
        raise VerlLogError(f"{path}: no 'step:N - key:value' line (not a verl console log)")
    keys = sorted({k for row in rows.values() for k in row})
    steps = sorted(rows)
    return pl.DataFrame(
        {"step": steps} | {k: [rows[s].get(k) for s in steps] for k in keys},
        schema={"step": pl.Int64} | {k: pl.Float64 for k in keys},
    )
