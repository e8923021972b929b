"""Asynchronous vs synchronous real GRPO on the same step budget.

Runs ``real sync`` and ``real async`` with each pipeline given, same settings and seed,
one after the other in this process's machine, all loading one warm start (trained once
in ``OUT/warmstart``). Prints wall clock (trace: first step start to last step end, and
the whole ``run()`` call including process spawn), its ratio to sync, learner and
generator idle fractions and tokens/s (all from :mod:`sim.trace.metrics`). Run:

``.venv/bin/python bench/real_async_vs_sync.py --steps 100 --out runs/async_vs_sync``
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import time
from pathlib import Path

from rolloutlab.real.rundir.async_config import AsyncConfig
from rolloutlab.real.rundir.config import SyncConfig
from rolloutlab.real.runners.async_loop import run_async
from rolloutlab.real.runners.stability import prepare_warm_start
from rolloutlab.real.runners.sync import run_sync
from rolloutlab.sim.trace.metrics import pipeline_summary, run_summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--controller", default="static:16")
    ap.add_argument(
        "--pipeline",
        default="one-step-off,bounded:2,interval:2",
        help="Comma list of asynchronous pipelines, each run beside sync (rolloutlab's spelling).",
    )
    # the old spelling fills the same field, with one note (as the CLI's renamed options do)
    ap.add_argument("--pipelines", dest="pipeline", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if any(a.split("=")[0] == "--pipelines" for a in sys.argv[1:]):
        print("note: --pipelines is deprecated, use --pipeline", file=sys.stderr)
    sync = SyncConfig(
        controller=args.controller,
        steps=args.steps,
        prompts=args.prompts,
        eval_every=args.steps,
        eval_size=64,
        checkpoint_every=args.steps,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    prepare_warm_start(args.out, AsyncConfig(sync=sync))
    rows = []
    for spec in ["sync", *args.pipeline.split(",")]:
        d = args.out / spec.replace(":", "_")
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
        (d / "warmstart").symlink_to((args.out / "warmstart").resolve(), target_is_directory=True)
        t0 = time.perf_counter()
        if spec == "sync":
            rollouts, steps = run_sync(sync, d, progress=False)
            S_max = 0
        else:
            acfg = AsyncConfig(sync=dataclasses.replace(sync), pipeline=spec)
            rollouts, steps = run_async(acfg, d, progress=False)
            S_max = acfg.pipeline_config.max_staleness
        total = time.perf_counter() - t0
        rs, ps = run_summary(rollouts, steps), pipeline_summary(rollouts, steps, S_max)
        rows.append(
            {
                "pipeline": spec,
                "steps": rs["steps"],
                "wall_s": rs["wall_clock_s"],
                "run_s": total,
                "learner_idle": ps["learner_idle_frac"],
                "generator_idle": ps["generator_idle_frac"],
                "tokens_per_s": rs["tokens_per_s"],
                "staleness_mean": ps["staleness_mean"],
                "staleness_max": ps["staleness_max"],
                "reward_last10": float(steps["reward_mean"].tail(10).mean()),
            }
        )
        print(rows[-1], flush=True)
    base = rows[0]["wall_s"]
    print(
        "| pipeline | steps | wall clock (s) | speed-up vs sync | run() incl. spawn (s) | learner idle | "
        "generator idle | tokens/s | staleness mean / max | reward, last 10 steps |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| `{r['pipeline']}` | {r['steps']} | {r['wall_s']:.1f} | {base / r['wall_s']:.2f}x | {r['run_s']:.1f} | "
            f"{r['learner_idle']:.3f} | {r['generator_idle']:.3f} | {r['tokens_per_s']:.0f} | "
            f"{r['staleness_mean']:.2f} / {r['staleness_max']} | {r['reward_last10']:.3f} |"
        )


if __name__ == "__main__":
    main()
