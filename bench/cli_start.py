"""Where a short ``rolloutlab sim`` spends its time: simulating, or starting up and drawing.

Runs, each in a fresh interpreter (the way a user runs the command), ``repeats`` times:

1. ``rolloutlab sim --steps N --no-figure`` on the default scenario, timing the whole
   process and, inside it, the simulation itself (the command's call of
   :func:`rolloutlab.sim.studies.compare.run_comparison`);
2. the same with the figure drawn;
3. ``rolloutlab sim --help`` against a bare ``python -c pass`` (interpreter start).

Prints ``simulate_share`` (simulation seconds / whole-process seconds of run 1; target
most of it, > 0.5), ``figure_cost`` (whole run 2 / whole run 1) and ``help_s`` /
``help_over_bare`` (medians over the repeats). Ratios are taken in one process tree
and so travel between machines to first order; record results in bench/RESULTS.md.

Usage: python bench/cli_start.py [--steps 100] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Runs inside the child interpreter: the command in-process, its simulation call timed.
CHILD = """
import json, sys, time
t0 = time.perf_counter()
import rolloutlab.sim.studies.compare as study  # the command imports it from here when it runs
from rolloutlab.cli import main
inner = {"s": 0.0}
run = study.run_comparison
def timed(*a, **k):
    t = time.perf_counter()
    try:
        return run(*a, **k)
    finally:
        inner["s"] += time.perf_counter() - t
study.run_comparison = timed
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    print(json.dumps({"simulate_s": inner["s"], "in_process_s": time.perf_counter() - t0}))
"""


def wall(argv: list[str]) -> tuple[float, str]:
    """Wall seconds of one child process and its standard output."""
    t = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return time.perf_counter() - t, done.stdout


def sim_run(steps: int, figure: bool, out: Path) -> tuple[float, float]:
    """``(whole-process s, simulation s)`` of one ``rolloutlab sim`` run."""
    flag = "--figure" if figure else "--no-figure"
    argv = [sys.executable, "-c", CHILD, "sim", "--steps", str(steps), flag, "--out", str(out)]
    whole_s, stdout = wall(argv)
    inner = json.loads(stdout.strip().splitlines()[-1])
    return whole_s, inner["simulate_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    shares, figure_costs, helps, bares = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            plain_s, sim_s = sim_run(args.steps, False, Path(tmp) / f"plain{r}")
            drawn_s, _ = sim_run(args.steps, True, Path(tmp) / f"drawn{r}")
            shares.append(sim_s / plain_s)
            figure_costs.append(drawn_s / plain_s)
            helps.append(wall([sys.executable, "-m", "rolloutlab", "sim", "--help"])[0])
            bares.append(wall([sys.executable, "-c", "pass"])[0])
    print(
        f"simulate_share={statistics.median(shares):.2f} (each: {', '.join(f'{s:.2f}' for s in shares)})"
    )
    print(f"figure_cost={statistics.median(figure_costs):.2f}")
    print(f"help_s={statistics.median(helps):.2f} bare_python_s={statistics.median(bares):.3f}")
    print(f"help_over_bare={statistics.median(helps) / statistics.median(bares):.1f}")


if __name__ == "__main__":
    main()
