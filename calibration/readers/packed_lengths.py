"""Read group-per-line length logs: one JSON line per group, one file per step.

The layout (written by rollout workers of verl / rllm forks that log the workload of each
step, ``packed_lengths_step_{N}.jsonl``): every line is one prompt's group,

    {"step": 3, "rank": 2, "dp_rank": 1, "tp_rank": 0, "local_index": 5,
     "input": 412, "output": [95, 1033, 88, 310], "n_sampling": 4, "validate": false}

``output`` holds the group's ``G`` response lengths (tokens), ``input`` the prompt's
token count, ``local_index`` the prompt's index within its data-parallel rank. Every rank
appends to the step's file, so a step's file holds the groups of all ranks; with tensor
parallelism each of a data-parallel rank's ``tp_rank`` workers may log the same groups.
A group is therefore keyed by ``(step, data-parallel rank, local_index)``, where the
data-parallel rank is ``dp_rank`` (else ``rank``, else 0); a line repeating a key from
another ``tp_rank`` with the same lengths is the same group and is read once. Lines with
``validate: true`` are evaluation rollouts, not training ones, and are left out.

The step is the number in the file name; a ``step`` field that disagrees is refused.
The log holds no cap and no finish reason, so no length is known to be censored (a cap
given on the command line censors lengths at it downstream).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from rolloutlab.calibration.readers.record_files import GroupedDataError, records

PACKED_FILE = re.compile(r"^packed_lengths_step_(\d+)\.jsonl$")
"""A step file of the group-per-line layout; group 1 is the step."""


def packed_step(path: Path) -> int | None:
    """The step in a ``packed_lengths_step_{N}.jsonl`` file name, None for another name."""
    m = PACKED_FILE.match(path.name)
    return int(m.group(1)) if m else None


def packed_files(folder: Path) -> list[Path]:
    """The ``packed_lengths_step_{N}.jsonl`` files of ``folder`` in step order (empty: none)."""
    found = [(s, f) for f in folder.iterdir() if (s := packed_step(f)) is not None]
    return [f for _, f in sorted(found)]


def _int_field(rec: dict, name: str, at: str, required: bool = True, low: int = 0) -> int | None:
    """``rec[name]`` as an int >= ``low``; None when absent and not ``required``.
    Raises GroupedDataError naming ``at`` (file and line) and the field otherwise."""
    v = rec.get(name)
    if v is None:
        if required:
            raise GroupedDataError(f"{at}: field {name!r}: missing")
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise GroupedDataError(f"{at}: field {name!r}: expected an integer, got {v!r}")
    if v != int(v) or v < low:
        raise GroupedDataError(f"{at}: field {name!r}: {v!r} is not an integer >= {low}")
    return int(v)


def read_packed(path: Path) -> tuple[list[dict], int]:
    """The samples of one step file as rows (``line, step, prompt, sample_idx, length,
    censored, cap, reward, prompt_tokens``; ``prompt`` is ``"{dp}:{local_index}"``) and
    the number of validation lines left out.

    Raises :class:`GroupedDataError` naming the file, the line and the field for: a line
    that is not a JSON object; a missing or empty ``output``, or a length in it that is not
    an integer >= 1; a missing or negative ``local_index``; an ``input``, ``rank``,
    ``dp_rank``, ``tp_rank`` or ``step`` that is not a non-negative integer; a ``step``
    other than the file name's; ``n_sampling`` other than the number of lengths; a group
    logged twice by one worker, or by two ``tp_rank`` workers with different lengths; a
    file with no training group.
    """
    step = packed_step(path)
    if step is None:
        raise GroupedDataError(f"{path}: not a packed_lengths_step_N.jsonl file")
    rows: list[dict] = []
    seen: dict[tuple, tuple] = {}  # (dp, local_index) -> (line, tp_rank, lengths)
    n_validate = 0
    for no, rec in records(path):
        at = f"{path}: line {no}"
        if rec.get("validate") is True:
            n_validate += 1
            continue
        logged_step = _int_field(rec, "step", at, required=False)
        if logged_step is not None and logged_step != step:
            raise GroupedDataError(
                f"{at}: field 'step': step {logged_step} in the file of step {step}"
            )
        out = rec.get("output")
        if not isinstance(out, list) or not out:
            raise GroupedDataError(
                f"{at}: field 'output': expected a non-empty list of response lengths, got {out!r}"
            )
        lengths = [_int_field({"output": v}, "output", at, low=1) for v in out]
        n = _int_field(rec, "n_sampling", at, required=False)
        if n is not None and n != len(lengths):
            raise GroupedDataError(
                f"{at}: field 'n_sampling': {n} samples stated, {len(lengths)} lengths in 'output'"
            )
        local = _int_field(rec, "local_index", at)
        prompt_tokens = _int_field(rec, "input", at, required=False)
        rank = _int_field(rec, "rank", at, required=False)
        dp = _int_field(rec, "dp_rank", at, required=False)
        tp = _int_field(rec, "tp_rank", at, required=False)
        key = (dp if dp is not None else (rank or 0), local)
        if key in seen:
            first_line, first_tp, first_lengths = seen[key]
            if tp is not None and tp != first_tp and lengths == first_lengths:
                continue  # the same group, logged by another tensor-parallel worker
            raise GroupedDataError(
                f"{at}: field 'local_index': group {local} of data-parallel rank {key[0]} "
                f"repeats line {first_line}"
                + (" with other lengths" if lengths != first_lengths else "")
                + "; give each group once"
            )
        seen[key] = (no, tp, lengths)
        prompt = f"{key[0]}:{local}"
        for j, length in enumerate(lengths):
            rows.append(
                {
                    "line": no,
                    "step": step,
                    "prompt": prompt,
                    "sample_idx": j,
                    "length": length,
                    "censored": False,
                    "cap": None,
                    "reward": None,
                    "prompt_tokens": prompt_tokens,
                }
            )
    if not rows:
        why = f"all {n_validate} lines are validation rollouts" if n_validate else "no lines"
        raise GroupedDataError(f"{path}: line 1: field 'output': no training group ({why})")
    return rows, n_validate
