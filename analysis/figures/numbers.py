"""How rolloutlab writes numbers and column names for people: the one place where a
float becomes text in a report page or a terminal table.

Rules (a value keeps the precision that means something, never ``4.821e+04``):

- seconds: ``48,209`` below 100,000 s, else hours with three significant digits
  (``13.4``), the unit in the column header (``wall clock (s)`` or ``(h)``: one unit per
  column, chosen from its median);
- fractions (columns ending ``_frac``, ``_rate``, ``_share``, ``agreement``, ``mdape``,
  ``mape``, ``rel_error``...): percent with three significant digits up to one decimal
  (``25.7``, ``3.5``, ``0.42``), the header says ``(%)``;
- counts: thousands separators (``19,200``);
- other floats: three significant digits (``47.6``, ``0.954``), thousands separators from
  1,000 on, and a short exponent only below 0.001 (learning rates: ``4e-6``);
- missing (None, NaN): an en dash.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TypeGuard

MISSING = "–"

_PERCENT = re.compile(
    r"(_frac|_rate|_share|_mdape|_mape|^mdape|^mape|agreement|rel_error|_agreement)(_|$)"
)
_WORDS = {
    "mean_G": "mean G",
    "G": "G",
    "prompts": "prompt batch B",
    "B": "prompt batch B",
    "lr": "learning rate",
    "tokens_per_s": "tokens/s",
    "S": "staleness S",
    "mdape": "MdAPE",
    "mape": "MAPE",
    "mae": "MAE",
    "sd": "sd",
    "se": "SE",
    "t": "t",
    "updates_per_batch": "updates per batch K",
    "max_num_seqs": "max_num_seqs",
}
SETTINGS = frozenset({"lr", "tau", "target", "target_reward", "eta_max_pred", "largest_safe_lr",
                      "collapse_lr"})  # fmt: skip
"""Columns of settings, written as people set them (:func:`setting`: no trailing zeros)."""
HOURS_FROM_S = 100_000.0
"""Median above which a seconds column is written in hours (27.8 h)."""


def is_percent(column: str) -> bool:
    """Whether ``column`` holds a fraction in [0, 1] written as percent."""
    return bool(_PERCENT.search(column))


def is_seconds(column: str) -> bool:
    """Whether ``column`` holds seconds (its name ends ``_s``, ``tokens_per_s`` excepted)."""
    return column.endswith("_s") and not column.endswith("per_s")


def seconds_unit(values: Sequence[float | None]) -> str:
    """``"h"`` when the median of the finite ``values`` is at least
    :data:`HOURS_FROM_S` seconds, else ``"s"``."""
    finite = sorted(float(v) for v in values if _finite(v))
    if not finite:
        return "s"
    return "h" if finite[len(finite) // 2] >= HOURS_FROM_S else "s"


def header(column: str, unit: str | None = None) -> str:
    """A column name in words with its unit: ``wall_clock_s`` -> ``wall clock (s)``,
    ``slot_idle_frac`` -> ``slot idle (%)``, ``straggler_rate`` -> ``straggler rate (%)``,
    ``tokens_per_s`` -> ``tokens/s``, ``mean_G`` -> ``mean G``. ``unit`` overrides the
    seconds unit (``"h"``)."""
    if column in _WORDS:
        return _WORDS[column] + (" (%)" if is_percent(column) else "")
    name, suffix = column, ""
    if is_seconds(column):
        name, suffix = column[:-2], f" ({unit or 's'})"
    elif column.endswith("_frac"):
        name, suffix = column[:-5], " (%)"
    elif is_percent(column):
        suffix = " (%)"
    elif column.endswith("_tokens"):
        name, suffix = column[:-7], " (tokens)"
    words = [_WORDS.get(w, w) for w in name.split("_")]
    return " ".join(words) + suffix


def number(x: float | int | None, digits: int = 3) -> str:
    """``x`` to ``digits`` significant digits (thousands separated; integers whole; an
    exponent only below 0.001): 48209.3 -> ``48,209``, 47.578 -> ``47.6``, 0.95388 ->
    ``0.954``, 4e-06 -> ``4e-6``, None or NaN -> :data:`MISSING`."""
    if x is None or isinstance(x, bool):
        return MISSING if x is None else str(x).lower()
    if isinstance(x, int):
        return f"{x:,}"
    if not math.isfinite(x):
        return MISSING if math.isnan(x) else ("∞" if x > 0 else "−∞")
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    if magnitude < -3:
        mantissa = f"{x:.{digits - 1}e}".split("e")[0].rstrip("0").rstrip(".")
        return f"{mantissa}e{magnitude}" if abs(float(mantissa)) < 10 else f"{x:.0e}"
    if magnitude >= digits - 1:
        return f"{round(x):,}"
    decimals = digits - 1 - magnitude
    return f"{x:,.{decimals}f}"


def setting(x: float | int | None) -> str:
    """A setting or threshold (tau, a target reward, a bound) as people write it: no
    trailing zeros: 3.0 -> ``3``, 0.90 -> ``0.9``, 1e-6 -> ``1e-6``."""
    text = number(x)
    return text.rstrip("0").rstrip(".") if "." in text and "e" not in text else text


def percent(x: float | None) -> str:
    """A fraction as percent (no sign): 0.2571 -> ``25.7``, 0.0042 -> ``0.42``, 1.0 ->
    ``100``."""
    if not _finite(x):
        return MISSING
    if abs(float(x)) < 1e-8:  # why: float noise of an exact prediction (2.8e-14) is 0
        return "0"
    return number(100 * float(x), 3)


def seconds(x: float | None, unit: str = "s") -> str:
    """Seconds in ``unit`` (``"s"`` or ``"h"``), without the unit: 48209.3 -> ``48,209``;
    in hours 48209.3 -> ``13.4``."""
    if not _finite(x):
        return MISSING
    return number(float(x) / 3600 if unit == "h" else float(x), 3)


def duration(x: float | None) -> str:
    """Seconds in a sentence, with units: ``48,209 s (13.4 h)``, ``526 s``, ``0.46 s``."""
    if not _finite(x):
        return MISSING
    x = float(x)
    if x >= 3600:
        return f"{number(x)} s ({number(x / 3600)} h)"
    return f"{number(x)} s"


def cell(column: str, value, unit: str | None = None) -> str:
    """``value`` of ``column`` as a table cell (the rules of this module)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if column in SETTINGS:
            return setting(value)
        if is_seconds(column):
            return seconds(value, unit or "s")
        if is_percent(column):
            return percent(value)
    return number(value)


def _finite(x: object) -> TypeGuard[float]:
    """A finite int or float (not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def text_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int = 100,
    marked: Sequence[bool] | None = None,
) -> str:
    """Already formatted ``rows`` under ``columns`` (header texts) as a terminal table at
    most ``width`` characters wide: a header wraps onto lines at its spaces, cells are
    right-aligned (the first column left), ``marked`` rows get a ``*`` in front. Columns
    that do not fit are left out and named on a last line."""
    marked = list(marked or [False] * len(rows))
    lead = 2 if any(marked) else 0
    widths: list[int] = []
    heads: list[list[str]] = []
    used = lead
    for i, col in enumerate(columns):
        cells = [r[i] for r in rows]
        longest_word = max(len(w) for w in col.split()) if col.strip() else 1
        w = max([longest_word, *(len(c) for c in cells)])
        head = _wrap(col, max(w, 8))  # why: a header as wide as its cells, in words
        w = max(w, *(len(h) for h in head))
        if used + w + (2 if widths else 0) > width and widths:
            break
        used += w + (2 if widths else 0)
        widths.append(w)
        heads.append(head)
    n = len(widths)
    depth = max(len(h) for h in heads)
    lines = []
    for d in range(depth):
        parts = []
        for i, (h, w) in enumerate(zip(heads, widths)):
            text = h[d - (depth - len(h))] if d >= depth - len(h) else ""
            parts.append(text.ljust(w) if i == 0 else text.rjust(w))
        lines.append(" " * lead + "  ".join(parts))
    lines.append(" " * lead + "  ".join("-" * w for w in widths))
    for r, m in zip(rows, marked):
        parts = [(r[i].ljust(w) if i == 0 else r[i].rjust(w)) for i, w in enumerate(widths)]
        lines.append(("* " if m else " " * lead) + "  ".join(parts))
    if n < len(columns):
        lines.append(f"(not shown at {width} columns: {', '.join(columns[n:])})")
    return "\n".join(line.rstrip() for line in lines)


def _wrap(text: str, width: int) -> list[str]:
    """``text`` broken at spaces into lines of at most ``width`` characters (a longer
    word stays whole)."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines or [""]
