"""Measure ``real sync`` step costs of many (G, B, capacity) settings in one process, their
steps interleaved round-robin (results/step_cost_law/PLAN2.md, PLAN3.md with ``--plan 3``;
docs/learning.md §5).

Every setting is one :class:`real.runners.sync.SyncRun` (the runner ``rolloutlab real
sync`` drives: graph-walk, ``static:G``, ``B`` prompts, eval size 16, no evaluation or
checkpoint before the last step, one torch thread, ``OMP_NUM_THREADS=1``) in
``OUT/pass{N}/g{G}_b{B}_c{capacity}_s{seed}``. Step ``t`` of every run is taken, in an
order shuffled per step (seed ``45 + N``), before step ``t + 1`` of any, so a drift of the
machine's speed falls on every setting alike. Run two passes side by side for the
run-to-run floor:

    python bench/step_cost_interleaved.py --out runs/sc2 --pass 1 --stop-at 13:10 &
    python bench/step_cost_interleaved.py --out runs/sc2 --pass 2 --stop-at 13:10

At ``--stop-at`` (machine time, checked between rounds) or after ``--steps`` rounds every
run is closed with the steps it made (its parquet tables written), so every setting of a
pass has the same steps; ``OUT/pass{N}/harness.json`` records the rounds made, the start
and end times and the load averages. ``bench/step_cost_validation.py --plan 2 OUT``
evaluates the plan. An existing ``OUT/pass{N}`` is refused (results are never overwritten).
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"  # before torch loads: the plan's one thread

import argparse
import dataclasses
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np

FIT = ((4, 4, 64, 0), (8, 4, 64, 0), (4, 8, 64, 0), (16, 4, 64, 0), (8, 8, 64, 0),
       (4, 16, 64, 0), (16, 8, 64, 0), (8, 16, 64, 0),
       (8, 8, 8, 0), (8, 8, 16, 0), (16, 4, 16, 0), (16, 8, 16, 0), (8, 16, 32, 0))  # fmt: skip
"""(G, B, capacity, seed) the law is fitted on: 16-128 rollouts a step; the last five vary
the engine's slots at fixed rollouts."""
HELDOUT = ((16, 16, 64, 0), (8, 32, 64, 1), (4, 64, 64, 1))
"""(G, B, capacity, seed) of the target: 256 rollouts a step."""
BEYOND = ((16, 32, 64, 0),)
"""Reported, not part of the target: 512 rollouts a step."""
HELDOUT3 = ((16, 16, 64, 1), (8, 32, 64, 2), (4, 64, 64, 2), (16, 16, 32, 2))
"""(G, B, capacity, seed) of plan 3's target (results/step_cost_law/PLAN3.md): 256 rollouts
a step at seeds no plan ran; the last on 32 engine slots."""


def plan_settings(plan: int) -> tuple[tuple, tuple, tuple]:
    """``(fit, held out, beyond)`` settings of plan 2 or 3 (PLAN2.md, PLAN3.md: the same fit
    settings). Raises ValueError on another plan."""
    if plan not in (2, 3):
        raise ValueError(f"plan_settings: plan must be 2 or 3, got {plan}")
    return (FIT, HELDOUT, BEYOND) if plan == 2 else (FIT, HELDOUT3, ())


def run_name(G: int, B: int, capacity: int, seed: int) -> str:
    """A setting's run directory name."""
    return f"g{G}_b{B}_c{capacity}_s{seed}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder of the passes")
    ap.add_argument("--pass", dest="pass_", type=int, required=True, help="pass number (>= 1)")
    ap.add_argument("--steps", type=int, default=30, help="steps per run (default 30)")
    ap.add_argument("--plan", type=int, default=2, choices=(2, 3),
                    help="the settings of PLAN2.md (default) or PLAN3.md")  # fmt: skip
    ap.add_argument("--stop-at", help="HH:MM machine time: close every run there")
    ap.add_argument("--warm-start-steps", type=int, default=350,
                    help="supervised warm-start steps (default 350, real sync's; cached)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.pass_ < 1 or args.steps < 1:
        ap.error("--pass and --steps must be >= 1")
    stop = None
    if args.stop_at:
        hh, mm = (int(x) for x in args.stop_at.split(":"))
        stop = dt.datetime.now().replace(hour=hh, minute=mm, second=0, microsecond=0)
    root = args.out / f"pass{args.pass_}"
    if root.exists():
        ap.error(f"{root} exists; give a new --out or another --pass")

    from rolloutlab.real.policy.warmstart import default_cache_dir
    from rolloutlab.real.rundir import folder as rundir
    from rolloutlab.real.rundir.config import SyncConfig
    from rolloutlab.real.rundir.run_checks import check_before_writing
    from rolloutlab.real.runners.sync import SyncRun

    settings = sum(plan_settings(args.plan), ())
    runs = []
    for G, B, capacity, seed in settings:
        cfg = dataclasses.replace(
            SyncConfig(), controller=f"static:{G}", prompts=B, capacity=capacity, seed=seed,
            steps=args.steps, task_name="graph-walk", eval_every=100_000, eval_size=16,
            checkpoint_every=100_000,
            warm_start=dataclasses.replace(SyncConfig().warm_start, steps=args.warm_start_steps),
        )  # fmt: skip
        check_before_writing(cfg)
        out = root / run_name(G, B, capacity, seed)
        run_id, cfg = rundir.claim(out, cfg, False, None, check=lambda c: None)
        runs.append(SyncRun(cfg, out, run_id, resume=False, cache_dir=default_cache_dir()))
    log = {"settings": [run_name(*s) for s in settings], "pass": args.pass_, "plan": args.plan,
           "start": dt.datetime.now().isoformat(timespec="seconds"),
           "load_start": os.getloadavg(), "cpu_start_s": time.process_time()}  # fmt: skip
    rng = np.random.default_rng(45 + args.pass_)
    rounds = 0
    for t in range(args.steps):
        if stop is not None and dt.datetime.now() >= stop:
            print(f"stop at {args.stop_at} after {rounds} rounds", file=sys.stderr)
            break
        for i in rng.permutation(len(runs)):
            runs[i].step(t)
        rounds += 1
        print(f"pass {args.pass_}: round {rounds} done", file=sys.stderr, flush=True)
    for r in runs if rounds else []:
        r.writer.close()  # rollouts.parquet, steps.parquet
    log.update(rounds=rounds, end=dt.datetime.now().isoformat(timespec="seconds"),
               load_end=os.getloadavg(), cpu_end_s=time.process_time())  # fmt: skip
    (root / "harness.json").write_text(json.dumps(log, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
