"""Read a run's per-step length aggregates (verl metric names) for ``--transfer aggregates``.

verl logs, per training step, ``response_length/mean``, ``response_length/max``,
``response_length/min`` and ``response_length/clip_ratio`` (``compute_data_metrics``;
:data:`calibration.readers.verl_tb.LENGTH_TAGS`). Accepted: a TensorBoard run folder
(:func:`calibration.readers.verl_tb.read_run`), or a JSONL / CSV file with one record per
step holding a step field (``step``, ``global_step``, ``training_step``) and those four
fields (verl's console/JSONL logger writes exactly these keys).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
from rolloutlab.calibration.fits.lengths_fit import StepLengthStats
from rolloutlab.calibration.readers.record_files import GroupedDataError
from rolloutlab.calibration.readers.verl_tb import LENGTH_TAGS, read_run

STEP_FIELDS = ("step", "global_step", "training_step")


def _records(path: Path) -> list[dict]:
    """One dict per record of a TensorBoard folder, JSONL or CSV file (line order);
    GroupedDataError naming the line on invalid JSON, or on another format."""
    if path.is_dir():
        return read_run(path).to_dicts()
    if path.suffix == ".csv":
        try:
            return pl.read_csv(path, infer_schema_length=None).to_dicts()
        except (pl.exceptions.PolarsError, UnicodeDecodeError) as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise GroupedDataError(
                f"{path}: line 1: not a readable metrics file ({first})"
            ) from None
    if path.suffix not in {".jsonl", ".json"}:
        raise GroupedDataError(
            f"{path}: line 1: field 'step': not a metrics file (expected a TensorBoard "
            "folder, .jsonl or .csv)"
        )
    out = []
    for line, text in enumerate(path.read_text(errors="replace").splitlines(), 1):
        try:
            rec = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError:
            raise GroupedDataError(f"{path}: line {line}: not a readable metrics file") from None
        out.append(rec if isinstance(rec, dict) else {})
    return out


def read_step_aggregates(
    path: str | Path, steps: list[int], n: dict[int, int], cap: int
) -> list[StepLengthStats]:
    """One :class:`calibration.fits.lengths_fit.StepLengthStats` per step of ``steps``
    (ascending) from the metrics at ``path`` (module docstring); ``n[step]`` is the
    number of responses of the step (``B * G``), ``cap`` the response cap.

    Raises GroupedDataError naming the file, line (1-based record) and field on: a
    missing file or field, another format, a non-numeric, NaN or negative value,
    ``min > mean``, ``mean > max``, ``max`` above ``cap``, a clip ratio outside
    ``[0, 1]``, a step logged twice, or a measured step with no record."""
    path = Path(path)
    if not path.exists():
        raise GroupedDataError(f"{path}: line 1: field 'step': no such file or folder")
    records = _records(path)
    keys = {k for r in records for k in r}
    step_field = next((f for f in STEP_FIELDS if f in keys), None)
    for name in (step_field, *LENGTH_TAGS):
        if name is None or name not in keys:
            raise GroupedDataError(f"{path}: line 1: field {name or 'step'!r}: missing")
    rows: dict[int, tuple[int, dict]] = {}
    for line, rec in enumerate(records, 1):
        step = rec.get(step_field)
        if step is None or all(rec.get(t) is None for t in LENGTH_TAGS):
            continue  # a record of other metrics only (e.g. validation)
        for name in (step_field, *LENGTH_TAGS):
            v = rec.get(name)
            if (
                isinstance(v, bool)
                or not isinstance(v, int | float)
                or not math.isfinite(v)
                or v < 0
            ):
                raise GroupedDataError(f"{path}: line {line}: field {name!r}: bad value {v!r}")
        v = {t: float(rec[t]) for t in LENGTH_TAGS}
        lo, mean, hi, clip = (
            v[f"response_length/{k}"] for k in ("min", "mean", "max", "clip_ratio")
        )
        problem = (
            "min > mean" if lo > mean else "mean > max" if mean > hi else
            f"max {hi:g} above the cap {cap}" if hi > cap else
            "clip_ratio outside [0, 1]" if clip > 1 else "min < 1" if lo < 1 else None
        )  # fmt: skip
        if problem:
            raise GroupedDataError(f"{path}: line {line}: field 'response_length': {problem}")
        if int(step) in rows:
            raise GroupedDataError(f"{path}: line {line}: field {step_field!r}: step {step} twice")
        rows[int(step)] = (line, v)
    out = []
    for s in steps:
        if s not in rows:
            raise GroupedDataError(
                f"{path}: line {len(records)}: field {step_field!r}: no record of step {s}"
            )
        v = rows[s][1]
        out.append(
            StepLengthStats(
                step=s,
                mean=v["response_length/mean"],
                max=v["response_length/max"],
                min=v["response_length/min"],
                clip_ratio=v["response_length/clip_ratio"],
                n=n[s],
                cap=cap,
            )
        )
    return out
