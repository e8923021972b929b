"""Every naive rule beside the simulator on ``compare idle`` outputs already written.

Reads each folder's ``idle_comparison.csv`` (one row per step, written by ``rolloutlab
compare idle``), recomputes the naive rules from its measured columns
(:func:`analysis.idle.compare.add_naive_rules`: constant, persistence, linear trend; an
output written before a rule existed gets it too) and prints the held-out makespan MdAPE
of the simulator (``drawn``), the replay and each rule, the best rule, and whether the
simulator beats it. Nothing is simulated again: ``drawn`` and ``replay`` are the
folder's own numbers.

``--repeats``: folders named ``NAME_rK`` are repeats of one command (same seed, so the
same lengths: only the machine's timing differs). Each repeat also gets the **lookup**
rule of a user who ran that command before: a held-out step's makespan predicted by the
median, over the other repeats, of their measured makespan at the same step. With
identical work, that rule's error is also the run-to-run floor of a per-step prediction.

Usage: python bench/idle_baselines.py DIR [DIR ...] [--repeats] [--out runs/idle_baselines]
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import polars as pl
from rolloutlab.analysis.idle.compare import NAIVE, add_naive_rules, summarize


def scores(path: Path) -> dict[str, float]:
    """Held-out makespan MdAPE (fraction) of every prediction of the ``compare idle``
    output folder ``path``, scope ``all``, keyed by prediction, plus ``held_out_steps``.
    Raises FileNotFoundError without ``idle_comparison.csv``, ValueError when it has no
    held-out step."""
    per_step = add_naive_rules(pl.read_csv(path / "idle_comparison.csv"))
    if per_step.filter(pl.col("split") == "held_out").height == 0:
        raise ValueError(f"{path / 'idle_comparison.csv'}: no held-out step")
    summary = summarize(per_step).filter(pl.col("scope") == "all")
    out = {r["prediction"]: r["makespan_mdape"] for r in summary.to_dicts()}
    return {"held_out_steps": float(summary["held_out_steps"][0]), **out}


def _makespans(d: Path) -> pl.DataFrame:
    """``step, split, measured_makespan_s`` of ``d/idle_comparison.csv``. Raises
    FileNotFoundError without it, ValueError naming the file (and the row) for a missing
    column or a makespan that is not a positive finite number."""
    path = d / "idle_comparison.csv"
    try:
        t = pl.read_csv(path).select(
            "step", "split", pl.col("measured_makespan_s").cast(pl.Float64, strict=True)
        )
    except pl.exceptions.PolarsError as exc:
        raise ValueError(f"{path}: {str(exc).splitlines()[0]}") from None
    bad = t.with_row_index("row").filter(
        ~pl.col("measured_makespan_s").is_finite() | (pl.col("measured_makespan_s") <= 0)
    )
    if bad.height:
        r = bad.row(0, named=True)
        raise ValueError(
            f"{path}: row {r['row'] + 1}: measured_makespan_s is {r['measured_makespan_s']}"
            " (a positive number of seconds expected)"
        )
    return t


def repeat_lookup(dirs: list[Path]) -> dict[Path, float]:
    """Held-out makespan MdAPE (fraction) of the lookup rule for every folder named
    ``NAME_rK`` that has at least one other repeat of ``NAME`` among ``dirs``: each held-out
    step's measured makespan against the median of the other repeats' measured makespan at
    that step. Raises ValueError naming the file when a repeat lacks one of the steps or
    its makespans are unreadable (:func:`_makespans`), FileNotFoundError without one."""
    groups: dict[str, list[Path]] = defaultdict(list)
    for d in dirs:
        m = re.fullmatch(r"(.+)_r\d+", d.name)
        if m:
            groups[m.group(1)].append(d)
    out: dict[Path, float] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        tables = {d: _makespans(d) for d in members}
        for d in members:
            held = tables[d].filter(pl.col("split") == "held_out").sort("step")
            others = []
            for o in members:
                if o == d:
                    continue
                same = tables[o].filter(pl.col("step").is_in(held["step"].to_list())).sort("step")
                if same.height != held.height:
                    raise ValueError(
                        f"{o / 'idle_comparison.csv'}: lacks held-out steps of {d.name}"
                    )
                others.append(same["measured_makespan_s"].to_numpy())
            meas = held["measured_makespan_s"].to_numpy()
            pred = np.median(np.stack(others), axis=0)
            out[d] = float(np.median(np.abs(pred - meas) / meas))
    return out


def row(name: str, s: dict[str, float], lookup_column: bool = False) -> str:
    """One markdown row: MdAPE in %, the best naive rule and the verdict; with
    ``lookup_column`` a ``lookup`` cell too (``-`` when ``s`` has none), which competes
    for the best naive rule where present."""
    rules = [*NAIVE, "lookup"] if "lookup" in s else list(NAIVE)
    best = min(rules, key=lambda r: s[r])
    verdict = "yes" if s["drawn"] < s[best] else "**no**"
    shown = ["drawn", "replay", *NAIVE]
    cells = " | ".join(f"{100 * s[p]:.1f}" for p in shown)
    if lookup_column:
        cells += f" | {100 * s['lookup']:.1f}" if "lookup" in s else " | -"
    return f"| {name} | {int(s['held_out_steps'])} | {cells} | {best} | {verdict} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="compare idle output folders")
    ap.add_argument("--out", default="runs/idle_baselines", help="folder of table.md")
    ap.add_argument("--repeats", action="store_true", help="add the lookup over NAME_rK repeats")
    args = ap.parse_args()
    extra = " lookup (repeats) |" if args.repeats else ""
    lines = [
        "| run | held-out steps | drawn | replay | constant | persistence | linear |"
        + extra
        + " best naive rule | drawn beats it |",
        "|---|---|---|---|---|---|---|" + ("---|" if args.repeats else "") + "---|---|",
    ]
    try:
        lookups = repeat_lookup(args.dirs) if args.repeats else {}
    except (FileNotFoundError, ValueError) as exc:
        raise SystemExit(str(exc)) from None
    # folders of one name (seed0/compare_idle, seed1/compare_idle) are told apart by their parent
    names = [d.name for d in args.dirs]
    if len(set(names)) < len(names):
        names = [f"{d.parent.name}/{d.name}" for d in args.dirs]
    for d, name in zip(args.dirs, names, strict=True):
        try:
            s = scores(d)
        except (FileNotFoundError, ValueError, pl.exceptions.PolarsError) as exc:
            raise SystemExit(f"{d}: {str(exc).splitlines()[0]}") from None
        if d in lookups:
            s["lookup"] = lookups[d]
        lines.append(row(name, s, lookup_column=args.repeats))
    out = Path(args.out) / "table.md"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n".join(lines) + "\n")
    except OSError as exc:
        raise SystemExit(f"{out}: cannot write it ({exc.strerror})") from None
    print(out.read_text(), end="")


if __name__ == "__main__":
    main()
