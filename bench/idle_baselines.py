"""Every naive rule beside the simulator on ``compare idle`` outputs already written.

Reads each folder's ``idle_comparison.csv`` (one row per step, written by ``rolloutlab
compare idle``), recomputes the naive rules from its measured columns
(:func:`analysis.idle.compare.add_naive_rules`: constant, persistence, linear trend; an
output written before a rule existed gets it too) and prints the held-out makespan MdAPE
of the simulator (``drawn``), the replay and each rule, the best rule, and whether the
simulator beats it. Nothing is simulated again: ``drawn`` and ``replay`` are the
folder's own numbers.

Usage: python bench/idle_baselines.py DIR [DIR ...] [--out runs/idle_baselines]
"""

from __future__ import annotations

import argparse
from pathlib import Path

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


def row(name: str, s: dict[str, float]) -> str:
    """One markdown row: MdAPE in %, the best naive rule and the verdict."""
    best = min(NAIVE, key=lambda r: s[r])
    verdict = "yes" if s["drawn"] < s[best] else "**no**"
    cells = " | ".join(f"{100 * s[p]:.1f}" for p in ("drawn", "replay", *NAIVE))
    return f"| {name} | {int(s['held_out_steps'])} | {cells} | {best} | {verdict} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="compare idle output folders")
    ap.add_argument("--out", default="runs/idle_baselines", help="folder of table.md")
    args = ap.parse_args()
    lines = [
        "| run | held-out steps | drawn | replay | constant | persistence | linear "
        "| best naive rule | drawn beats it |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for d in args.dirs:
        try:
            lines.append(row(d.name, scores(d)))
        except (FileNotFoundError, ValueError, pl.exceptions.PolarsError) as exc:
            raise SystemExit(f"{d}: {exc}") from None
    out = Path(args.out) / "table.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text(), end="")


if __name__ == "__main__":
    main()
