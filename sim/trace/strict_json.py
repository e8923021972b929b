"""Strict JSON for every file the project writes: ``null`` for a missing or non-finite
value, never ``NaN``/``Infinity`` (not JSON; strict parsers such as ``jq`` or
JavaScript's ``JSON.parse`` reject them), and atomic files (a temporary name in the same
folder, then :func:`os.replace`, so a killed writer leaves the old file or the new one).

Lives in ``sim/`` because ``real/``, ``calibration/`` and ``analysis/`` may all import
``sim/`` (docs/DESIGN.md, "Packages").
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


def to_strict(obj: Any, default: Any = None) -> Any:
    """``obj`` with every non-finite float (Python or numpy) replaced by None, numpy
    scalars and arrays made plain, tuples made lists, dataclasses made dicts; anything
    else JSON cannot hold goes through ``default`` (a callable, e.g. ``str``) when given."""
    if isinstance(obj, float | np.floating):
        v = float(obj)
        return v if math.isfinite(v) else None
    if isinstance(obj, bool | np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, dict):
        return {str(k): to_strict(v, default) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_strict(v, default) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_strict(obj.tolist(), default)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_strict(dataclasses.asdict(obj), default)
    if obj is None or isinstance(obj, str | int):
        return obj
    return default(obj) if default is not None else obj


def dumps(obj: Any, *, indent: int | None = None, default: Any = None, **kw: Any) -> str:
    """:func:`json.dumps` of :func:`to_strict` ``(obj)`` with ``allow_nan=False``: the one
    JSON encoder of the project. Raises TypeError for a value JSON cannot hold (when no
    ``default`` converts it)."""
    return json.dumps(to_strict(obj, default), indent=indent, allow_nan=False, **kw)


JSONL_SIZE_TO_PARSE_WHOLE = 64 << 20
"""Bytes up to which a JSONL file whose line failed is parsed whole, to tell a
pretty-printed JSON document from a damaged line (an error path only)."""


def jsonl_error(path: str | os.PathLike, line_no: int, exc: json.JSONDecodeError) -> str:
    """The one-line message for line ``line_no`` (1-based) of the JSONL file ``path``
    that ``json.loads`` refused with ``exc``: names the file and line, says that JSONL is
    one JSON object per line and, when the whole file parses as one JSON document (an
    indented object or array), says that too, with the ``jq`` line that converts it."""
    head = f"{path}: line {line_no}: not valid JSON ({exc.msg})"
    try:
        too_big = os.path.getsize(path) > JSONL_SIZE_TO_PARSE_WHOLE
        whole = None if too_big else json.loads(Path(path).read_text())
    except (OSError, ValueError):
        whole = None
    if isinstance(whole, list | dict):
        what = "an array" if isinstance(whole, list) else "an object"
        fix = "jq -c '.[]'" if isinstance(whole, list) else "jq -c ."
        return (
            f"{head}: the file is one JSON document ({what} over several lines), but JSONL is "
            f"expected: one JSON object per line (convert with `{fix} {path}`)"
        )
    return f"{head}: JSONL is expected, one JSON object per line"


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (use null for a missing value)")


def loads(text: str) -> Any:
    """:func:`json.loads` that refuses ``NaN``, ``Infinity`` and ``-Infinity`` (which
    Python's reader accepts): ValueError (``json.JSONDecodeError`` for other bad text)."""
    return json.loads(text, parse_constant=_refuse)


def write_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder and
    :func:`os.replace` (the folder must exist). Raises OSError as ``open`` does."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; outputs are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | Path, obj: Any, *, indent: int | None = 2, default: Any = None) -> Path:
    """Write ``obj`` as strict, indented JSON (:func:`dumps`; ``indent=None``: one line)
    plus a newline to ``path``, atomically (:func:`write_atomic`)."""
    return write_atomic(path, dumps(obj, indent=indent, default=default) + "\n")
