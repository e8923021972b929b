"""Evaluate the step-cost law's plan (results/step_cost_law/PLAN.md) on the runs of
``bench/step_cost_measure.py``:

    python bench/step_cost_validation.py runs/step_cost --out runs/step_cost_check

Fits the mechanism law (:mod:`analysis.learning.step_cost_law`) and the baselines (the
power law ``c0 + c1 (B G)^p`` of :mod:`analysis.learning.step_cost`, a straight line in the
rollouts through each count's mean, the fit runs' mean step cost) on the fit settings'
runs only, then predicts every setting's mean CPU s per step (held-out ones: 256 rollouts a
step). Writes ``OUT/step_cost_validation.csv`` (one row per setting), ``OUT/law.json``
(the coefficients) and ``OUT/step_cost_validation.md``, and prints the markdown.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import polars as pl
from rolloutlab.analysis.learning.compare import run_steps
from rolloutlab.analysis.learning.step_cost import busy_time, pooled_cost
from rolloutlab.analysis.learning.step_cost_law import fit_law, predict_setting, read_steps
from rolloutlab.calibration.readers.run_curve import read_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_cost_measure import FIT, HELDOUT

RULES = ("law", "law_own_features", "power_law", "linear", "constant")


def mean_step_s(run) -> float:
    """A run's mean CPU s per step (generation + training + sync)."""
    return float((run.cpu["gen"] + run.cpu["train"] + run.cpu["sync"]).mean())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", type=Path, help="folder of bench/step_cost_measure.py's runs")
    ap.add_argument("--out", type=Path, required=True, help="new folder for the tables")
    ap.add_argument("--draws", type=int, default=50, help="feature draws per step (default 50)")
    args = ap.parse_args(argv)
    if args.out.exists():
        ap.error(f"--out {args.out} exists; give a new directory")
    dirs = {}
    for G, B in FIT + HELDOUT:
        found = sorted(args.runs.glob(f"g{G}_b{B}_r*"))
        found = [d for d in found if (d / "steps.parquet").exists()]
        if found:
            dirs[(G, B)] = found
    fit_set = [gb for gb in FIT if gb in dirs]  # those present (PLAN.md's amendment)
    if len({g * b for g, b in fit_set}) < 2:
        ap.error(f"{args.runs}: finished fit runs span fewer than two rollout counts")
    missing = [f"{g}x{b}" for g, b in FIT + HELDOUT if (g, b) not in dirs]
    if missing:
        print(f"note: no finished run of {', '.join(missing)}", file=sys.stderr)
    runs = {gb: [read_steps(d) for d in ds] for gb, ds in dirs.items()}
    fit_runs = [r for gb in fit_set for r in runs[gb]]
    law = fit_law(fit_runs)
    power = pooled_cost([run_steps(d, "cpu") for gb in fit_set for d in dirs[gb]],
                        [read_run(d) for gb in fit_set for d in dirs[gb]])  # fmt: skip
    counts = np.array([g * b for g, b in fit_set], float)
    per_setting = np.array([np.mean([mean_step_s(r) for r in runs[gb]]) for gb in fit_set])
    line = np.polyfit(counts, per_setting, 1)  # (slope, intercept)
    level = float(per_setting.mean())
    steps = min(len(r.groups) for r in fit_runs)
    rows = []
    for (G, B), rs in runs.items():
        measured = [mean_step_s(r) for r in rs]
        m = float(np.mean(measured))
        preds = {
            "law": predict_setting(law, fit_runs, G, B, steps, rs[0].capacity, args.draws),
            "law_own_features": float(np.mean([law.step_s(r.features).mean() for r in rs])),
            "power_law": float(power[0] + busy_time(power, G * B)),
            "linear": float(np.polyval(line, G * B)),
            "constant": level,
        }
        row = {"G": G, "B": B, "rollouts": G * B,
               "role": "fit setting" if (G, B) in fit_set else "held out",
               "passes": len(rs), "measured_s": m,
               "pass_spread": (max(measured) - min(measured)) / m if len(rs) > 1 else None}  # fmt: skip
        for k, v in preds.items():
            row[f"{k}_s"] = v
            row[f"{k}_error"] = (v - m) / m
        rows.append(row)
    table = pl.DataFrame(rows).sort("rollouts", "G")
    args.out.mkdir(parents=True)
    table.write_csv(args.out / "step_cost_validation.csv")
    doc = {"gen": law.gen, "train": law.train, "sync_s": law.sync_s,
           "power_law": {"c0_s": power[0], "c1_s": power[1], "p": power[2]},
           "linear": {"c0_s": float(line[1]), "c1_s_per_rollout": float(line[0])},
           "constant_s": level, "fit_runs": [r.name for r in fit_runs],
           "steps_per_run": steps, "draws": args.draws}  # fmt: skip
    (args.out / "law.json").write_text(json.dumps(doc, indent=2) + "\n")
    text = markdown(table)
    (args.out / "step_cost_validation.md").write_text(text)
    print(text)
    return 0


def markdown(table: pl.DataFrame) -> str:
    """The table as docs markdown: CPU ms per step and errors in %."""
    head = ("| G | B | rollouts | role | measured ms (pass spread) | law | law, own features | "
            "power law | linear | constant |\n|---|---|---|---|---|---|---|---|---|---|\n")  # fmt: skip
    lines = []
    for r in table.iter_rows(named=True):
        spread = "-" if r["pass_spread"] is None else f"{100 * r['pass_spread']:.0f} %"
        cells = [f"{1000 * r[k + '_s']:.0f} ({100 * r[k + '_error']:+.0f} %)" for k in RULES]
        lines.append(f"| {r['G']} | {r['B']} | {r['rollouts']} | {r['role']} | "
                     f"{1000 * r['measured_s']:.0f} ({spread}) | " + " | ".join(cells) + " |")  # fmt: skip
    held = table.filter(pl.col("role") == "held out")
    pooled = ", ".join(f"{k.replace('_', ' ')} {100 * held[k + '_error'].abs().mean():.1f} %"
                       for k in RULES) if held.height else "-"  # fmt: skip
    return head + "\n".join(lines) + f"\n\nMean |error| over the held-out settings: {pooled}\n"


if __name__ == "__main__":
    sys.exit(main())
