"""Resume integrity: before ``--resume`` continues a run, its step and rollout tables are
checked against the checkpoint it would start from.

A checkpoint ``step_k`` claims steps ``0..k-1`` are done; the run's ``steps.jsonl`` must
then hold each of those steps exactly once, and ``rollouts.jsonl`` every group of each of
them complete (``group_size`` rows per prompt, ``sample_idx`` ``0..G-1`` once each, a
whole number of ``B``-prompt rounds per step). A table damaged before the checkpoint
(lines lost or repeated) would otherwise leave a permanent gap that only a later
``compare idle`` notices. :func:`resume_point` repairs by starting from the newest
checkpoint at or before the first damaged step (the resumed run re-runs every step from
there, rewriting the tables after it), or refuses, listing the damaged steps, when no such
checkpoint is left (:data:`real.rundir.checkpoint.KEEP` are kept).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

from rolloutlab.real.rundir.folder import RunDirError


def _rows(path: Path) -> list[dict]:
    """The JSON rows of a JSONL table (a torn or non-object line is skipped, as
    :func:`sim.trace.jsonl.truncate_jsonl` does); [] when the file is missing."""
    if not path.exists():
        return []
    out = []
    with open(path) as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and isinstance(row.get("step"), int):
                out.append(row)
    return out


def damaged_steps(out: Path, upto: int, prompts: int | None) -> list[int]:
    """Steps ``0..upto-1`` that ``out``'s tables do not hold exactly once and complete:
    missing from or repeated in ``steps.jsonl``, or with no rollouts, an incomplete or
    repeated group, or a prompt count that is not a multiple of ``prompts`` (B) in
    ``rollouts.jsonl`` (not checked when ``prompts`` is None: an asynchronous run may drop
    stale groups). Sorted; [] when the tables agree with a checkpoint at ``upto``."""
    out = Path(out)
    bad: set[int] = set()
    counts = Counter(r["step"] for r in _rows(out / "steps.jsonl") if r["step"] < upto)
    bad |= {t for t in range(upto) if counts[t] != 1}
    groups: dict[int, dict[object, list]] = defaultdict(lambda: defaultdict(list))
    for r in _rows(out / "rollouts.jsonl"):
        if r["step"] < upto:
            groups[r["step"]][r.get("prompt_id")].append(r)
    for t in range(upto):
        by_prompt = groups.get(t)
        if not by_prompt or (prompts is not None and len(by_prompt) % prompts):
            bad.add(t)
            continue
        for rows in by_prompt.values():
            G = rows[0].get("group_size")
            idx = sorted(r.get("sample_idx") for r in rows)
            if not isinstance(G, int) or idx != list(range(G)):
                bad.add(t)
                break
    return sorted(bad)


def checkpoint_step(path: Path) -> int:
    """``k`` of a checkpoint directory ``step_{k:06d}``."""
    return int(Path(path).name.split("_")[1])


def resume_point(out: Path, prompts: int | None) -> tuple[Path | None, list[int]]:
    """The checkpoint to resume ``out`` from and the damaged steps it re-runs.

    Without damage: the newest checkpoint and ``[]``. With damaged steps before it: the
    newest checkpoint at or before the first of them, and the list. None (start from
    step 0) when there is no checkpoint. Raises :class:`real.rundir.folder.RunDirError` listing
    the damaged steps when no checkpoint at or before the first one is left (nothing is
    changed then)."""
    out = Path(out)
    done = sorted((out / "checkpoints").glob("step_*[0-9]"))
    if not done:
        return None, []
    bad = damaged_steps(out, checkpoint_step(done[-1]), prompts)
    if not bad:
        return done[-1], []
    usable = [c for c in done if checkpoint_step(c) <= bad[0]]
    if not usable:
        shown = ", ".join(map(str, bad[:20])) + (" ..." if len(bad) > 20 else "")
        raise RunDirError(
            f"{out}: steps.jsonl/rollouts.jsonl miss or repeat step(s) {shown} before "
            f"checkpoint {done[-1].name}, and no checkpoint at or before step {bad[0]} is "
            "left to re-run them from; refusing to resume with a gap (nothing was changed; "
            "start a fresh run)"
        )
    return usable[-1], bad
