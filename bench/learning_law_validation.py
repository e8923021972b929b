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
    # the steps baselines alone, on a comparison already made (seconds)
    python bench/learning_law_validation.py --target 0.35 \
        --baselines-of results/learning_law_heldout/l_shape/target_0.35 --out DIR

Beside the law, ``DIR/comparison/learning_steps_baselines.csv`` (and ``.md``) holds the
naive rules for steps to target (:mod:`analysis.learning.step_baselines`: constant and
log-plane through the fit settings' mean steps) and the seed floor (the same setting's
mean over the bundled seeds that were not predicted), per setting, with the pooled mean
|error| over the held-out settings.

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
from rolloutlab.analysis.learning.step_baselines import (
    baseline_table,
    pooled_errors,
    setting_means,
)
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


def measured_steps(runs: pl.DataFrame, evals: pl.DataFrame, target: float) -> pl.DataFrame:
    """``run, G, B, seed, steps``: steps to held-out ``target`` of every bundled run, the
    first evaluation at step >= 0 with accuracy >= target, counted from 1 (null = never),
    as :func:`analysis.learning.heldout.measured_heldout` counts them."""
    meta = runs.group_by("run").agg(pl.col("G", "B", "seed").first(), pl.col("step").max())
    hit = (
        evals.filter((pl.col("step") >= 0) & (pl.col("accuracy") >= target - 1e-12))
        .group_by("run")
        .agg(pl.col("step").min().alias("hit"))
    )
    return (
        meta.join(hit, on="run", how="left")
        .with_columns(
            pl.when(pl.col("hit") <= pl.col("step")).then(pl.col("hit") + 1).alias("steps")
        )
        .select("run", "G", "B", "seed", "steps")
        .sort("run")
    )


def steps_baselines(
    runs: pl.DataFrame,
    evals: pl.DataFrame,
    comparison: pl.DataFrame,
    fit_block: dict,
    target: float,
    fit_set: set[tuple[int, int]],
    fit_seeds: set[int],
    real_seeds: set[int],
) -> tuple[pl.DataFrame, dict]:
    """The steps table beside the law (module docstring): ``comparison`` is the law's
    ``learning_comparison.csv``, ``fit_block`` its ``fit.json`` (the step cost each rule is
    priced with: static runs, so a rule's time is its steps times one step's cost);
    returns the per-setting table and the pooled mean |error| over its held-out settings."""
    steps = measured_steps(runs, evals, target)
    settings = pl.DataFrame(sorted(fit_set), schema=["G", "B"], orient="row")
    fit = setting_means(steps.filter(pl.col("seed").is_in(fit_seeds)).join(settings, on=["G", "B"]))
    measured = setting_means(steps.filter(pl.col("seed").is_in(real_seeds)))
    floor = setting_means(steps.filter(~pl.col("seed").is_in(real_seeds)))
    law_runs = comparison.join(steps.select("run", "G", "B"), on="run")
    law = {
        (int(g), int(b)): float(p)
        for g, b, p in law_runs.group_by("G", "B")
        .agg(pl.col("predicted_steps_to_target").cast(pl.Float64).mean())
        .iter_rows()
        if p is not None
    }
    cost = (fit_block["cost_c0_s"], fit_block["cost_c1_s_per_rollout"], fit_block["cost_exponent"])
    per_step = {gb: cost[0] + cost[1] * (gb[0] * gb[1]) ** cost[2] for gb in measured}
    timed = comparison.join(steps.select("run", "G", "B"), on="run").drop_nulls(
        "measured_time_to_target_s"
    )
    times = {
        (int(g), int(b)): float(t)
        for g, b, t in timed.group_by("G", "B")
        .agg(pl.col("measured_time_to_target_s").mean())
        .iter_rows()
    }
    table = baseline_table(measured, law, fit, floor or None, per_step, times)
    return table, pooled_errors(table)


def markdown(table: pl.DataFrame, pooled: dict, target: float) -> str:
    """``table`` (:func:`steps_baselines`) as the docs' markdown, errors in %."""

    def pct(v) -> str:
        return "-" if v is None else f"{100 * v:+.0f} %"

    head = (f"Steps to held-out accuracy {target} (mean over the seeds that reached it); time = "
            "steps x the law's step cost, error against the measured CPU s\n\n"
            "| G | B | role | measured steps | law | constant | log-plane | seed floor | "
            "best naive | law beats it | measured CPU s | time error: law / constant / "
            "log-plane |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")  # fmt: skip
    lines = []
    for r in table.iter_rows(named=True):
        cells = [f"{r[k + '_steps']:.0f} ({pct(r[k + '_error'])})"
                 if r[k + "_steps"] is not None else "-"
                 for k in ("law", "constant", "log_plane", "seed_floor")]  # fmt: skip
        beats = {True: "yes", False: "**no**", None: "-"}[r["law_beats_naive"]]
        mt = r.get("measured_time_s")
        times = " / ".join(pct(r.get(f"{k}_time_error")) for k in ("law", "constant", "log_plane"))
        lines.append(f"| {r['G']} | {r['B']} | {r['role']} | {r['measured_steps']:.0f} | "
                     + " | ".join(cells) + f" | {r['best_naive'].replace('_', '-')} | {beats} | "
                     + ("-" if mt is None else f"{mt:.3g}") + f" | {times} |")  # fmt: skip
    tail = "\n\nMean |error| over the held-out settings: " + ", ".join(
        f"{k.replace('_', ' ')} {'-' if v is None else f'{100 * v:.1f} %'}"
        for k, v in pooled.items()
    )
    return head + "\n".join(lines) + tail + "\n"


def write_baselines(out: Path, *args) -> None:
    """Write ``out/learning_steps_baselines.csv`` and ``.md`` (:func:`steps_baselines`'s
    arguments after ``out``) and print the markdown."""
    table, pooled = steps_baselines(*args)
    out.mkdir(parents=True, exist_ok=True)
    table.write_csv(out / "learning_steps_baselines.csv")
    text = markdown(table, pooled, args[4])
    (out / "learning_steps_baselines.md").write_text(text)
    print(text)


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
    ap.add_argument("--baselines-of", type=Path, default=None,
                    help="a comparison folder already made (its learning_comparison.csv): "
                         "write only the steps baselines beside it, into --out")  # fmt: skip
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
    if args.baselines_of is not None:
        table = args.baselines_of / "learning_comparison.csv"
        if not table.exists():
            ap.error(f"--baselines-of {args.baselines_of}: no learning_comparison.csv there")
        fit_block = json.loads((args.baselines_of / "fit.json").read_text())
        write_baselines(args.out, runs, evals, pl.read_csv(table), fit_block, args.target,
                        fit_set, fit_seeds, real_seeds)  # fmt: skip
        return 0
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
    rc = subprocess.run(cmd, check=False).returncode
    if rc == 0:
        done = args.out / "comparison"
        comparison = pl.read_csv(done / "learning_comparison.csv")
        fit_block = json.loads((done / "fit.json").read_text())
        write_baselines(done, runs, evals, comparison, fit_block, args.target, fit_set,
                        fit_seeds, real_seeds)  # fmt: skip
    return rc


if __name__ == "__main__":
    sys.exit(main())
