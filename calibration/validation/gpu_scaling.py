"""Published step times across GPU counts and the naive rules a user would apply to them.

A curve is one source's runs of one setting (model, prompt batch B, group size G,
response cap) at several GPU counts N (trainer GPUs). Along a curve the tokens per step
are fixed, so a rule calibrated on one point ``c`` predicts point ``i`` as:

- ``constant``: ``t_i = t_c``;
- ``tokens_per_gpu``: step time proportional to tokens per trainer GPU,
  ``t_i = t_c N_c / N_i`` (perfect scaling);
- a straight line in N needs two points: one calibration point does not define it. On a
  curve of three or more points :func:`line_errors` gives the line through the *other*
  points (least squares in N), a rule that sees one point more than the others.

The error of a prediction is ``predicted / published - 1``. The simulator's own errors on
the same curves come from ``bench/verl_async_validation.py`` and
``bench/areal_scaling_validation.py``; this module gives the rules they must beat.
Table origins: ``calibration/data/SOURCE.md``.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

RULES = ("constant", "tokens_per_gpu")
"""Naive rules, in the order of :func:`rule_errors`' rows."""

_FIELDS = ("source", "curve", "trainer_gpus", "gpus", "step_s")


class ScalingDataError(ValueError):
    """A row of a GPU-scaling table that cannot be read: names file, row and field."""


@dataclass(frozen=True)
class Point:
    """One published run: ``trainer_gpus`` (N, > 0), ``gpus`` (all GPUs) and the mean
    ``step_s`` (seconds, > 0)."""

    source: str
    curve: str
    trainer_gpus: int
    gpus: int
    step_s: float


def default_path() -> Path:
    """The bundled table, ``calibration/data/gpu_scaling.csv``."""
    return Path(str(resources.files("rolloutlab.calibration") / "data" / "gpu_scaling.csv"))


def load(path: Path | None = None) -> dict[tuple[str, str], list[Point]]:
    """Curves of the table at ``path`` (default :func:`default_path`), keyed by
    ``(source, curve)``, each sorted by trainer GPUs.

    Raises ScalingDataError naming file, row (1 = first data row) and field on a missing
    column, a non-integer or non-positive GPU count, a non-finite or non-positive step
    time, or two points of one curve at the same GPU count."""
    path = default_path() if path is None else Path(path)
    curves: dict[tuple[str, str], list[Point]] = {}
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in _FIELDS if c not in (reader.fieldnames or [])]
        if missing:
            raise ScalingDataError(f"{path}: header: missing column(s) {', '.join(missing)}")
        for row_no, row in enumerate(reader, start=1):
            p = _point(path, row_no, row)
            pts = curves.setdefault((p.source, p.curve), [])
            if any(q.trainer_gpus == p.trainer_gpus for q in pts):
                raise ScalingDataError(
                    f"{path}: row {row_no}: trainer_gpus: {p.trainer_gpus} appears twice on "
                    f"curve {p.source}/{p.curve}"
                )
            pts.append(p)
    return {k: sorted(v, key=lambda p: p.trainer_gpus) for k, v in curves.items()}


def _point(path: Path, row_no: int, row: dict[str, str]) -> Point:
    vals: dict[str, float] = {}
    for field, kind in (("trainer_gpus", int), ("gpus", int), ("step_s", float)):
        raw = (row.get(field) or "").strip()
        try:
            v = kind(raw)
        except ValueError:
            raise ScalingDataError(
                f"{path}: row {row_no}: {field}: not a number: {raw!r}"
            ) from None
        if not (math.isfinite(v) and v > 0):
            raise ScalingDataError(f"{path}: row {row_no}: {field}: must be > 0, got {raw!r}")
        vals[field] = v
    return Point(
        row["source"].strip(),
        row["curve"].strip(),
        int(vals["trainer_gpus"]),
        int(vals["gpus"]),
        vals["step_s"],
    )


def predict(rule: str, cal: Point, n: int) -> float:
    """Step time (s) that ``rule`` (one of :data:`RULES`) predicts at ``n`` trainer GPUs
    from the calibration point ``cal``. Raises ValueError on an unknown rule or n <= 0."""
    if n <= 0:
        raise ValueError(f"need n > 0 trainer GPUs, got {n}")
    if rule == "constant":
        return cal.step_s
    if rule == "tokens_per_gpu":
        return cal.step_s * cal.trainer_gpus / n
    raise ValueError(f"unknown rule {rule!r}; known: {', '.join(RULES)}")


def rule_errors(points: list[Point], rule: str) -> list[list[float]]:
    """``errors[c][i]``: relative error of ``rule`` at point ``i`` calibrated on point
    ``c`` (0 on the diagonal). Shape: len(points) x len(points)."""
    return [[predict(rule, cal, p.trainer_gpus) / p.step_s - 1 for p in points] for cal in points]


def worst(errors: list[list[float]]) -> float:
    """Largest absolute error off the diagonal (every held-out point, every calibration)."""
    return max(
        (abs(e) for c, row in enumerate(errors) for i, e in enumerate(row) if i != c), default=0.0
    )


LINE_MIN_POINTS = 3
"""Points a curve needs for :func:`line_errors` (two to draw the line, one held out)."""


def line_errors(points: list[Point]) -> list[float] | None:
    """``errors[i]``: relative error at point ``i`` of the straight line ``t = a + b N``
    (least squares in trainer GPUs N) through every *other* point of the curve; None on
    a curve of fewer than :data:`LINE_MIN_POINTS` points. Shape: len(points).

    Raises ValueError when the other points share one GPU count (no line through them)."""
    if len(points) < LINE_MIN_POINTS:
        return None
    errs = []
    for i, p in enumerate(points):
        rest = [q for j, q in enumerate(points) if j != i]
        if len({q.trainer_gpus for q in rest}) < 2:
            raise ValueError(f"line: the points other than N = {p.trainer_gpus} share one N")
        slope, intercept = np.polyfit([q.trainer_gpus for q in rest], [q.step_s for q in rest], 1)
        errs.append(float(intercept + slope * p.trainer_gpus) / p.step_s - 1)
    return errs
