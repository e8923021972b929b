"""A run's learning curve as the learning fit needs it: per step G, lr and each group's
number of correct responses (:func:`read_run`), from a run directory of
``rolloutlab real sync`` or any run with the trace tables and per-group correctness.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from rolloutlab.sim.trace import schema as trace


class RunDataError(ValueError):
    """A run directory the fitter cannot use; the message names the file and field."""


@dataclass(frozen=True)
class RunCurve:
    """What the fit needs from a run; arrays are per learner step (T,)."""

    G: np.ndarray
    """(T,) int group size."""
    lr: np.ndarray
    """(T,) float learning rate."""
    counts: list[np.ndarray]
    """Per step, (B_t,) int correct responses of each group."""
    dynamic_sampling: bool
    """Whether only informative groups were trained (loss averaged over them)."""

    @property
    def accuracy(self) -> np.ndarray:
        """(T,) observed fraction of correct responses per step."""
        return np.array([c.sum() / (c.size * g) for c, g in zip(self.counts, self.G, strict=True)])


def _trace_file(run_dir: Path, kind: str) -> Path:
    for suffix in (".parquet", ".jsonl"):
        p = run_dir / f"{kind}{suffix}"
        if p.exists():
            return p
    raise RunDataError(f"{run_dir}: no {kind}.parquet or {kind}.jsonl")


def read_run(run_dir: str | Path) -> RunCurve:
    """Read a run directory of ``rolloutlab real sync`` (or any run with the trace tables
    and per-group correctness). Raises RunDataError naming the file and field when the
    correctness is missing or does not match the rollout table's groups."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDataError(f"{run_dir}: no such run directory")
    try:
        steps = trace.read(_trace_file(run_dir, "steps"), "steps").sort("step")
        rpath = _trace_file(run_dir, "rollouts")
        rolls = trace.read(rpath, "rollouts")
    except trace.TraceError as exc:
        raise RunDataError(str(exc)) from None
    groups = (
        rolls.group_by("step", "prompt_id")
        .agg(pl.col("group_size").first(), pl.len().alias("n"), *(
            [pl.col("correct").cast(pl.Int64).sum().alias("k"), pl.col("correct").null_count().alias("nulls")]
            if "correct" in rolls.columns else []
        ))
        .sort("step", "prompt_id")
    )  # fmt: skip
    by_step = groups.partition_by("step", as_dict=True, maintain_order=True)
    G, lr, counts = [], [], []
    has_correct = (
        "nulls" in groups.columns and int(groups["nulls"].sum()) == 0
    )  # "correct" was aggregated
    learner = _learner_counts(run_dir) if not has_correct else {}
    for row in steps.iter_rows(named=True):
        t = row["step"]
        g = by_step.get((t,))
        if g is None:
            raise RunDataError(f"{rpath}: no rollouts for step {t}")
        G.append(int(g["group_size"][0]))
        lr.append(row["lr"])
        if has_correct:
            counts.append(g["k"].to_numpy().astype(int))
        else:
            c = learner.get(t)
            if c is None or len(c) != g.height or max(c) > G[-1]:
                raise RunDataError(
                    f"{run_dir / 'learner.jsonl'}: step {t}: field 'group_correct' missing or "
                    f"not {g.height} counts <= G = {G[-1]} (and {rpath.name} has no 'correct')"
                )
            counts.append(np.asarray(c, dtype=int))
    if not G:
        raise RunDataError(f"{run_dir}: the steps table has no rows")
    if any(v is None or not v > 0 for v in lr):
        raise RunDataError(f"{run_dir}: steps table: field 'lr' missing or <= 0")
    cfg = run_dir / "config.json"
    ds = False
    if cfg.exists():
        ds = bool(json.loads(cfg.read_text()).get("config", {}).get("dynamic_sampling", False))
    return RunCurve(np.array(G), np.array(lr, dtype=float), counts, ds)


def _learner_counts(run_dir: Path) -> dict[int, list[int]]:
    path = run_dir / "learner.jsonl"
    if not path.exists():
        raise RunDataError(
            f"{path}: no such file, and the rollout table has no field 'correct': "
            "the run carries no per-group correctness"
        )
    out = {}
    for no, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            row = json.loads(line)
            if "group_correct" not in row:
                raise RunDataError(f"{path}: line {no}: no field 'group_correct'")
            out[int(row["step"])] = row["group_correct"]
    return out
