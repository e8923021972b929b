"""Rerun the learning-law validation of docs/learning.md §5 from the bundled tables.

The 90 graph-walk runs behind the README's learning-validation table took 75 minutes to
run on 2 cores (two sessions). Their per-step and per-evaluation tables are bundled in
``results/learning_law_heldout/`` (``runs.csv``, ``evals.csv``). This script rebuilds a
minimal run directory per run from them (the trace tables ``compare learning`` reads:
steps with the learning rate, one rollout row per sample with its correctness,
``learner.jsonl`` with the CPU seconds per phase, ``eval.jsonl``, ``config.json``) and
runs ``rolloutlab compare learning`` on them exactly as §5 does: fit the law on seeds 0-4
of the (4, 4), (16, 4) and (4, 16) runs, price the step cost on seeds 5-9 of the same
settings (run in the session of the predicted runs), predict the fresh seeds 5-9 of all
nine settings (the six outside the L are the test); held-out target, CPU clock, saturating
law.

    python bench/learning_law_validation.py --target 0.35 --out runs/ll3_check
    # the first plan: corners, the 45 runs of seeds 0-4
    python bench/learning_law_validation.py --fit-settings 4x4,16x16 --real-seeds 0-4 \
        --cost-seeds fit --out DIR

The rebuilt rollouts carry no lengths or times (response lengths 1, times 0): the
learning comparison reads only the groups' correctness, the learning rate, whether the
loss averaged over the informative groups only (``dynamic_sampling``, true for every
``real sync`` run here: it drops the uniform groups from the loss), the CPU seconds and
the evaluations. Expect 12-20 minutes on 2 cores (the fit and 45 predictions); the
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


def _seeds(text: str) -> set[int]:
    """``"0-4"`` or ``"5,7,9"`` -> the seeds."""
    if "-" in text:
        lo, hi = (int(v) for v in text.split("-"))
        return set(range(lo, hi + 1))
    return {int(v) for v in text.split(",")}


def _settings(text: str) -> set[tuple[int, int]]:
    """``"4x4,16x4"`` -> {(G, B), ...}."""
    return {(int(g), int(b)) for g, b in (v.split("x") for v in text.split(","))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", type=float, default=0.35, help="held-out accuracy target")
    ap.add_argument("--out", type=Path, required=True, help="new directory for runs and outputs")
    ap.add_argument(
        "--fit-settings",
        default="4x4,16x4,4x16",
        help="GxB settings fitted on (default: the L, §5; 4x4,16x16: the corners)",
    )
    ap.add_argument("--fit-seeds", default="0-4", help="seeds of the fit runs (default 0-4)")
    ap.add_argument("--real-seeds", default="5-9",
                    help="seeds of the predicted runs (default 5-9, the fresh ones; 0-4: the "
                         "first grid)")  # fmt: skip
    ap.add_argument("--cost-seeds", default="5-9",
                    help="seeds of the fit settings' runs that price the step cost (default "
                         "5-9: run in the session of the fresh seeds; 'fit': the fit runs)")  # fmt: skip
    args = ap.parse_args(argv)
    if not 0 < args.target <= 1:
        ap.error(f"--target must be in (0, 1], got {args.target}")
    parsed = {}
    for opt, text, parse in (
        ("--fit-settings", args.fit_settings, _settings),
        ("--fit-seeds", args.fit_seeds, _seeds),
        ("--real-seeds", args.real_seeds, _seeds),
        ("--cost-seeds", args.cost_seeds, lambda t: set() if t == "fit" else _seeds(t)),
    ):
        try:
            parsed[opt] = parse(text)
        except ValueError:
            form = "GxB,GxB,..." if opt == "--fit-settings" else "0-4 or 5,7,9"
            ap.error(f"{opt} {text!r}: expected {form}")
    fit_set, fit_seeds = parsed["--fit-settings"], parsed["--fit-seeds"]
    real_seeds, cost_seeds = parsed["--real-seeds"], parsed["--cost-seeds"]
    if args.out.exists():
        ap.error(f"--out {args.out} exists; give a new directory")
    runs, evals = pl.read_csv(DATA / "runs.csv"), pl.read_csv(DATA / "evals.csv")
    key = {
        r["run"]: ((r["G"], r["B"]), r["seed"]) for r in runs.unique("run").iter_rows(named=True)
    }
    have_settings = sorted({gb for gb, _ in key.values()})
    have_seeds = sorted({s for _, s in key.values()})
    fit_names = sorted(n for n, (gb, s) in key.items() if gb in fit_set and s in fit_seeds)
    real_names = sorted(n for n, (gb, s) in key.items() if s in real_seeds)
    cost_names = sorted(n for n, (gb, s) in key.items() if gb in fit_set and s in cost_seeds)
    if not fit_names or not real_names or (cost_seeds and not cost_names):
        ap.error(f"no bundled runs match ({len(fit_names)} fit, {len(real_names)} predicted, "
                 f"{len(cost_names)} pricing); bundled settings "
                 f"{','.join(f'{g}x{b}' for g, b in have_settings)}, seeds "
                 f"{have_seeds[0]}-{have_seeds[-1]}")  # fmt: skip
    try:  # created only once the selection is valid: a refused call leaves nothing behind
        args.out.mkdir(parents=True)
    except OSError as exc:
        ap.error(f"--out {args.out}: cannot create it ({exc.strerror})")
    dirs = {
        name: rebuild(name, g.sort("step"), evals.filter(pl.col("run") == name), args.out / "runs")
        for (name,), g in runs.group_by("run", maintain_order=True)
        if name in set(fit_names) | set(real_names) | set(cost_names)
    }
    fit = [a for n in fit_names for a in ("--fit", str(dirs[n]))]
    real = [a for n in real_names for a in ("--real", str(dirs[n]))]
    real += [a for n in cost_names for a in ("--cost-from", str(dirs[n]))]
    cmd = [sys.executable, "-m", "rolloutlab", "compare", "learning", *fit, *real, "--target-accuracy", str(args.target),
           "--target-on", "heldout", "--clock", "cpu", "--learning-model", "saturating",
           "--out", str(args.out / "comparison")]  # fmt: skip
    print(f"running: rolloutlab compare learning ({len(fit_names)} --fit, {len(real_names)} "
          f"--real, {len(cost_names)} --cost-from) ...", file=sys.stderr)  # fmt: skip
    return subprocess.run(cmd, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
