"""Typed checks of one field read from a file (calibration/scenario JSON, block files):
the file readers' half of the validation layer (the command line's half is
``rolloutlab.commands.options.types``). Each check returns the value or raises ``error`` with
``field <name>: expected <what>, got <value>``; the caller prefixes the file.

JSON numbers only: a string, a boolean or ``null`` is not a number, and ``NaN`` /
``Infinity`` (which Python's ``json`` reads) are refused as non-finite.
"""

from __future__ import annotations

import math
from typing import Any


def number(
    value: Any,
    name: str,
    *,
    integer: bool = False,
    min: float | None = None,
    max: float | None = None,
    min_open: bool = False,
    error: type[Exception] = ValueError,
) -> Any:
    """``value`` as a finite ``float`` (or ``int`` with ``integer``; an integral float
    such as ``3.0`` is accepted) within ``[min, max]`` (``(min, ...`` with ``min_open``).
    Raises ``error`` naming the field ``name`` otherwise."""
    what = "an integer" if integer else "a finite number"
    if min is not None:
        what += f" {'>' if min_open else '>='} {min:g}"
    if max is not None:
        what += f" {'and ' if min is not None else ''}<= {max:g}"
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok:
        ok = math.isfinite(value) and (not integer or float(value).is_integer())
    if ok and min is not None:
        ok = value > min if min_open else value >= min
    if ok and max is not None:
        ok = value <= max
    if not ok:
        raise error(f"field {name}: expected {what}, got {value!r}")
    return int(value) if integer else float(value)


def reject_constant(name: str) -> Any:
    """``json.loads(..., parse_constant=reject_constant)``: ``NaN``, ``Infinity`` and
    ``-Infinity`` are not JSON; raises ValueError naming the constant."""
    raise ValueError(f"{name} is not valid JSON (use null for a missing value)")
