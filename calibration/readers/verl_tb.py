"""Read verl TensorBoard logs (one scalar per metric per training step) into a step table.

verl's ``TensorBoard`` logger writes ``events.out.tfevents.*`` files in one folder per
run; each metric (``response_length/mean``, ``timing_s/gen``, ...) is a scalar tag with
one value per training step. Records are read with TensorBoard's own reader
(``tensorboard.backend.event_processing``): its record reader checks the crc32 of every
record, its ``EventAccumulator`` decodes the scalars. No protobuf is parsed here.

The step table (polars) has one row per step: ``step`` (int64) and one Float64 column
per tag, null where a tag has no value at that step (e.g. ``val-core/*`` every 5 steps).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import polars as pl
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.tensorflow_stub import errors as tb_errors
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow

LENGTH_TAGS = (
    "response_length/mean",
    "response_length/max",
    "response_length/min",
    "response_length/clip_ratio",
)
"""Tags the length fit needs (verl ``compute_data_metrics``)."""


class VerlLogError(ValueError):
    """A verl log that cannot be used; the message names the file, and the tag and step
    where one is at fault."""


def event_files(run_dir: str | Path) -> list[Path]:
    """The ``events.out.tfevents.*`` files of one run folder (or the file itself), sorted.

    Raises: :class:`VerlLogError` if the path does not exist or holds no event file.
    """
    p = Path(run_dir)
    if p.is_file():
        if not p.name.startswith("events.out.tfevents."):
            raise VerlLogError(f"{p}: not a run folder nor an events.out.tfevents.* file")
        return [p]
    if not p.is_dir():
        raise VerlLogError(f"{p}: no such run folder or event file")
    files = sorted(p.glob("events.out.tfevents.*"))
    if not files:
        raise VerlLogError(f"{p}: no events.out.tfevents.* file in this run folder")
    return files


def check_records(path: Path) -> int:
    """Walk every record of an event file, checking lengths and crc32; return the count.

    Raises: :class:`VerlLogError` on an empty file, a truncated record or a failed crc
    check (TensorBoard's ``DataLossError``), naming the file and the record number.
    """
    if path.stat().st_size == 0:
        raise VerlLogError(f"{path}: empty event file (0 bytes)")
    reader = pywrap_tensorflow.PyRecordReader_New(str(path).encode())
    n = 0
    try:
        while True:
            reader.GetNext()
            n += 1
    except tb_errors.OutOfRangeError:
        return n
    except tb_errors.DataLossError as exc:
        raise VerlLogError(f"{path}: corrupt event file at record {n}: {exc.message}") from None
    finally:
        reader.file_handle.close()


def read_event_file(path: str | Path) -> pl.DataFrame:
    """Scalars of one event file as a step table (see module docstring).

    A tag logged twice at one step keeps the later record (TensorBoard's own rule).
    Raises: :class:`VerlLogError` for an empty or corrupt file or one with no scalars.
    """
    path = Path(path)
    check_records(path)
    acc = event_accumulator.EventAccumulator(
        str(path), size_guidance={event_accumulator.SCALARS: 0}
    )
    acc.Reload()
    tags = acc.Tags().get("scalars", [])
    if not tags:
        raise VerlLogError(f"{path}: no scalar tags (not a verl TensorBoard log?)")
    values: dict[str, dict[int, float]] = {}
    for tag in tags:
        values[tag] = {int(e.step): float(e.value) for e in acc.Scalars(tag)}
    steps = sorted({s for col in values.values() for s in col})
    data = {"step": pl.Series("step", steps, dtype=pl.Int64)}
    for tag in sorted(values):
        col = values[tag]
        data[tag] = pl.Series(tag, [col.get(s) for s in steps], dtype=pl.Float64)
    return pl.DataFrame(data)


def read_run(run_dir: str | Path) -> pl.DataFrame:
    """The step table of one run folder; several event files (a resumed run) are merged,
    a later file's value winning at a step both logged.

    Raises: :class:`VerlLogError` (missing folder/file, empty or corrupt file, no
    ``response_length/*`` tags); see :func:`read_event_file`.
    """
    files = event_files(run_dir)
    table = read_event_file(files[0])
    for f in files[1:]:
        table = table.update(read_event_file(f), on="step", how="full")
    missing = [t for t in LENGTH_TAGS if t not in table.columns]
    if missing:
        raise VerlLogError(
            f"{', '.join(map(str, files))}: missing tag(s) {missing} "
            f"(the length fit needs {list(LENGTH_TAGS)})"
        )
    return table.sort("step")


def require(
    table: pl.DataFrame, tags: Iterable[str], source: str, nonnegative: bool = True
) -> pl.DataFrame:
    """Rows of ``table`` where every tag in ``tags`` is logged, checked.

    Steps where any of the tags is null (not logged, e.g. the last step's ``perf/*``)
    are left out; callers report how many. Raises :class:`VerlLogError` naming
    ``source``, the tag and the step for a missing tag, a NaN/inf value, or (with
    ``nonnegative``) a negative value.
    """
    tags = list(tags)
    for t in tags:
        if t not in table.columns:
            raise VerlLogError(f"{source}: missing tag {t!r}")
    rows = table.drop_nulls(subset=tags)
    for t in tags:
        for step, v in zip(rows["step"].to_list(), rows[t].to_list()):
            if not math.isfinite(v):
                raise VerlLogError(
                    f"{source}: tag {t!r} at step {step} is {v} (expected a finite number)"
                )
            if nonnegative and v < 0:
                raise VerlLogError(f"{source}: tag {t!r} at step {step} is negative ({v})")
    return rows
