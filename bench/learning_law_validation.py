"""Rerun the learning-law validation of docs/learning.md §5 from the bundled tables.

The 45 graph-walk runs behind the README's learning-validation table take about 50 minutes
to regenerate on 2 cores. Their per-step and per-evaluation tables are bundled in
``results/learning_law_heldout/`` (``runs.csv``, ``evals.csv``). This script rebuilds a
minimal run directory per run from them (the trace tables ``compare learning`` reads:
steps with the learning rate, one rollout row per sample with its correctness,
``learner.jsonl`` with the CPU seconds per phase, ``eval.jsonl``, ``config.json``) and
runs ``rolloutlab compare learning`` on them exactly as §5 does: fit on the (4, 4) and
(16, 16) runs, predict all 45, held-out target, CPU clock, saturating law.

    python bench/learning_law_validation.py --target 0.35 --out runs/ll2_check

The rebuilt rollouts carry no lengths or times (response lengths 1, times 0): the
learning comparison reads only the groups' correctness, the learning rate, whether the
loss averaged over the informative groups only (``dynamic_sampling``, true for every
``real sync`` run here: it drops the uniform groups from the loss), the CPU seconds and
the evaluations. Expect the fit to take about 5 minutes on 2 cores; the
output directory's ``learning_comparison_by_controller.csv`` is the README's table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
from rolloutlab.sim.trace import schema as trace

DATA = Path(__file__).resolve().parents[1] / "results" / "learning_law_heldout"


def rebuild(run: str, steps: pl.DataFrame, evals: pl.DataFrame, out: Path) -> Path:
    """One run directory under ``out`` from its rows of ``runs.csv`` and ``evals.csv``."""
    d = out / run
    d.mkdir(parents=True, exist_ok=True)
    first = steps.row(0, named=True)
    G, B, seed = int(first["G"]), int(first["B"]), int(first["seed"])
    rollouts, table, learner = [], [], []
    for r in steps.iter_rows(named=True):
        t = int(r["step"])
        counts = [int(k) for k in str(r["group_correct"]).split()]
        for i, k in enumerate(counts):
            for j in range(G):
                rollouts.append({
                    "run_id": run, "step": t, "prompt_id": t * B + i, "sample_idx": j,
                    "group_size": G, "policy_version": t, "learner_version": t,
                    "prompt_tokens": 1, "response_tokens": 1, "finish_reason": "stop",
                    "worker": 0, "t_submit": 0.0, "t_first_token": 0.0, "t_finish": 0.0,
                    "reward": float(j < k), "correct": bool(j < k),
                })  # fmt: skip
        cpu = {k: float(r[k]) for k in ("cpu_gen_s", "cpu_train_s", "cpu_sync_s")}
        table.append({
            "run_id": run, "step": t, "t_start": float(t), "t_end": t + 1.0,
            "gen_time": cpu["cpu_gen_s"], "train_time": cpu["cpu_train_s"],
            "sync_time": cpu["cpu_sync_s"], "lr": float(r["lr"]),
            "reward_mean": float(r["reward_mean"]), "controller_state": "{}",
        })  # fmt: skip
        learner.append({"step": t, "t_s": t + 1.0, "G": G, "reward_mean": r["reward_mean"],
                        "group_correct": counts, **cpu})  # fmt: skip
    trace.write_parquet(
        pl.DataFrame(rollouts, schema=trace.ROLLOUT_SCHEMA), d / "rollouts.parquet", "rollouts"
    )
    trace.write_parquet(pl.DataFrame(table, schema=trace.STEP_SCHEMA), d / "steps.parquet", "steps")
    (d / "learner.jsonl").write_text("".join(json.dumps(x) + "\n" for x in learner))
    (d / "eval.jsonl").write_text("".join(
        json.dumps({"step": int(e["step"]), "t_s": 0.0, "accuracy": float(e["accuracy"])}) + "\n"
        for e in evals.sort("step").iter_rows(named=True)
    ))  # fmt: skip
    cfg = {"task_name": "graph-walk", "controller": f"static:{G}", "prompts": B, "seed": seed,
           "eval_size": int(evals["eval_size"][0]),
           "dynamic_sampling": bool(first["dynamic_sampling"]),
           "learner": {"lr": float(first["lr"])}}  # fmt: skip
    (d / "config.json").write_text(json.dumps({"kind": "real-sync", "config": cfg}))
    return d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", type=float, default=0.35, help="held-out accuracy target")
    ap.add_argument("--out", type=Path, required=True, help="new directory for runs and outputs")
    args = ap.parse_args(argv)
    if not 0 < args.target <= 1:
        ap.error(f"--target must be in (0, 1], got {args.target}")
    if args.out.exists():
        ap.error(f"--out {args.out} exists; give a new directory")
    try:
        args.out.mkdir(parents=True)
    except OSError as exc:
        ap.error(f"--out {args.out}: cannot create it ({exc.strerror})")
    runs, evals = pl.read_csv(DATA / "runs.csv"), pl.read_csv(DATA / "evals.csv")
    dirs = {
        name: rebuild(name, g.sort("step"), evals.filter(pl.col("run") == name), args.out / "runs")
        for (name,), g in runs.group_by("run", maintain_order=True)
    }
    fit = [
        a
        for n in sorted(dirs)
        if n.startswith(("g4_b4_", "g16_b16_"))
        for a in ("--fit", str(dirs[n]))
    ]
    real = [a for n in sorted(dirs) for a in ("--real", str(dirs[n]))]
    cmd = [sys.executable, "-m", "rolloutlab", "compare", "learning", *fit, *real, "--target-accuracy", str(args.target),
           "--target-on", "heldout", "--clock", "cpu", "--learning-model", "saturating",
           "--out", str(args.out / "comparison")]  # fmt: skip
    print("running: rolloutlab compare learning (10 --fit, 45 --real) ...", file=sys.stderr)
    return subprocess.run(cmd, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
