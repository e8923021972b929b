"""Measure ``real sync`` step costs at several (G, B) in one session (docs/learning.md §5,
"A step-cost law across rollout counts").

Runs ``rolloutlab real sync`` on the graph-walk task once per (G, B) and pass, one at a
time, ``OMP_NUM_THREADS=1``, seed 0 (one cached warm start for all), into
``OUT/g{G}_b{B}_r{pass}``. Pass 1 runs the settings in a fixed shuffled order, pass 2 in
the reverse order, so a drift of the machine's load over the session falls on fit and
held-out settings alike; the two passes of one setting give the run-to-run floor. Run it
under ``nice -n 10`` (the machine is shared):

    nice -n 10 python bench/step_cost_measure.py --out runs/step_cost

A run directory that exists is skipped (its result is kept), so an interrupted session
resumes where it stopped; ``bench/step_cost_validation.py OUT`` then evaluates the plan.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

FIT = ((4, 4), (8, 4), (4, 8), (16, 4), (8, 8), (4, 16), (16, 8), (8, 16))
"""(G, B) the cost law is fitted on: 16-128 rollouts a step."""
HELDOUT = ((16, 16), (8, 32), (4, 64))
"""(G, B) it predicts: 256 rollouts a step, beyond every fitted count."""


def order(seed: int = 45) -> list[tuple[int, int]]:
    """Pass 1's order: every setting once, shuffled with ``seed``."""
    settings = list(FIT + HELDOUT)
    perm = np.random.default_rng(seed).permutation(len(settings))
    return [settings[i] for i in perm]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder of the run directories")
    ap.add_argument("--steps", type=int, default=30, help="training steps per run (default 30)")
    ap.add_argument("--passes", type=int, default=2, choices=(1, 2), help="1 or 2 (default 2)")
    args = ap.parse_args(argv)
    first = order()
    plan = [(gb, 1) for gb in first] + [(gb, 2) for gb in first[::-1]][
        : len(first) * (args.passes - 1)
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for (G, B), rep in plan:
        d = args.out / f"g{G}_b{B}_r{rep}"
        if (d / "steps.parquet").exists():
            print(f"skip {d} (done)", file=sys.stderr)
            continue
        cmd = [sys.executable, "-m", "rolloutlab", "real", "sync", "--task", "graph-walk",
               "--controller", f"static:{G}", "--prompts", str(B), "--steps", str(args.steps),
               "--eval-every", "1000", "--checkpoint-every", "1000", "--eval-size", "16",
               "--seed", "0", "--quiet", "--out", str(d)]  # fmt: skip
        print(f"run {d}", file=sys.stderr, flush=True)
        rc = subprocess.run(cmd, env=env, check=False).returncode
        if rc != 0:
            print(f"{d}: rolloutlab real sync exited {rc}", file=sys.stderr)
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
