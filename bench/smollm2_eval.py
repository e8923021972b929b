"""SmolLM2-135M-Instruct runs against the simulator: the evaluation of docs/real_lm.md,
from finished `rolloutlab real sync` / `real async` run folders to one summary.

Every prediction is made by the project's CLI (the commands are printed and stored):

1. ``calibrate run-cost CAL`` (this machine's cost from the calibration run's own steps), then
   ``calibrate groups CAL/rollouts.parquet --cost-from`` it: the calibration.
2. Item 4: ``compare groups CAL --held-out HELD --tau TAUS``: predicted P(max/median > tau)
   for G = 1..16 beside HELD's measured P, with two naive rules computed here from
   ``compare run-spread`` of CAL (measured on CAL itself): *constant* (CAL's P at its
   logged G for every G) and *lookup* (CAL's P at G where G <= its logged G, else the
   logged G's). ``sim --calibration`` at HELD's G: the simulated step-time distribution
   (median, 10th and 90th percentile) beside HELD's measured one.
3. Item 5: ``compare idle --real RUN --clock cpu|wall`` on each ``--idle`` run (fit on
   the first half of its steps): drawn, replay, constant and persistence rows.
4. Item 6: ``sim --calibration`` with each ``--controller`` spec, as many steps as its
   measured run and ``--sim-seeds`` seeds, against the measured run: straggler rate,
   mean G, median step time; held-out accuracy measured only (the simulator predicts a
   training reward, not this model's held-out accuracy).

Per run (``runs.csv``): controller, steps, mean G, straggler rate at tau, step time
(median, 10th/90th percentile, wall), generation/learner/sync medians, held-out accuracy
at the start and the end (``eval.jsonl``), ``training/rollout_probs_diff_{mean,max}``
(median over steps with an update).

Usage: python bench/smollm2_eval.py --cal runs/lm_s8_seed0 --held runs/lm_s16_seed1
       --idle runs/lm_s8_seed0,runs/lm_s16_seed1,runs/lm_s4_seed2
       --controller static:4=runs/lm_s4_seed2,static:16=runs/lm_s16_seed1,sagc=runs/lm_sagc_seed3
       --runs runs/lm_async_seed4 --out results/smollm2_eval
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
from rolloutlab.analysis.inputs.run_input import load_run
from rolloutlab.sim.trace.metrics import step_metrics

from rolloutlab.commands.options.common import renamed_argument

TAUS = "2,3,4"


def cli(args: list[str], log: list[str]) -> str:
    """Run ``rolloutlab ARGS`` (the installed CLI of this interpreter); returns stdout."""
    cmd = [sys.executable, "-m", "rolloutlab", *args]
    log.append("rolloutlab " + " ".join(shlex.quote(a) for a in args))
    print("$", log[-1], flush=True)
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{log[-1]} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return res.stdout


def quantiles(x: np.ndarray) -> dict:
    """median, 10th and 90th percentile (s)."""
    return {
        "median": float(np.median(x)),
        "p10": float(np.quantile(x, 0.1)),
        "p90": float(np.quantile(x, 0.9)),
    }


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_row(run_dir: Path, tau: float) -> dict:
    """One measured run's numbers (module docstring, ``runs.csv``)."""
    doc = json.loads((run_dir / "config.json").read_text())["config"]
    # a real async run nests the synchronous settings under "sync"
    run = load_run(run_dir, capacity=doc.get("sync", doc)["capacity"])
    m = step_metrics(run.rollouts, tau)
    st = run.steps.sort("step")
    step_s = (st["t_end"] - st["t_start"]).to_numpy()
    ev = jsonl(run_dir / "eval.jsonl") if (run_dir / "eval.jsonl").exists() else []
    learner = jsonl(run_dir / "learner.jsonl")
    diffs = {
        k: [r[k] for r in learner if r.get(k) is not None]
        for k in ("training/rollout_probs_diff_mean", "training/rollout_probs_diff_max")
    }
    cfg = doc.get("sync", doc)
    return {
        "run": run_dir.name,
        "controller": cfg.get("controller"),
        "seed": cfg.get("seed"),
        "steps": st.height,
        "mean_G": float(m["group_size"].mean()),
        "straggler_rate": float(m["straggler"].mean()),
        "step_s": quantiles(step_s),
        "gen_s_median": float(st["gen_time"].median()),
        "train_s_median": float(st["train_time"].median()),
        "sync_s_median": float(st["sync_time"].median()),
        "response_length_median": float(run.rollouts["response_tokens"].median()),
        "accuracy_start": ev[0]["accuracy"] if ev else None,
        "accuracy_end": ev[-1]["accuracy"] if len(ev) > 1 else None,
        "greedy_start": ev[0].get("greedy_accuracy") if ev else None,
        "greedy_end": ev[-1].get("greedy_accuracy") if len(ev) > 1 else None,
        "eval_steps": [e["step"] for e in ev],
        "updates": sum(r.get("kept_groups", 0) > 0 for r in learner),
        **{k.split("/")[-1]: (float(np.median(v)) if v else None) for k, v in diffs.items()},
    }


def sim_steps(
    cal: Path, spec: str, prompts: int, steps: int, out: Path, log: list[str], seed: int = 0
):
    """``sim --calibration`` of one controller: its steps and rollouts tables."""
    cli(
        ["sim", "--calibration", str(cal), "--controller", spec, "--prompts", str(prompts),
         "--steps", str(steps), "--seed", str(seed), "--no-figure", "--out", str(out)],
        log,
    )  # fmt: skip
    return pl.read_parquet(out / "steps.parquet"), pl.read_parquet(out / "rollouts.parquet")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cal", type=Path, required=True)
    ap.add_argument("--held", type=Path, required=True)
    ap.add_argument("--idle", default="")
    new = ap.add_argument("--controller", default="", help="spec=RUN_DIR,...")
    renamed_argument(ap, "--controllers", new)
    ap.add_argument("--runs", default="", help="further runs for runs.csv only")
    ap.add_argument("--tau", type=float, default=4.0)
    ap.add_argument("--sim-steps", type=int, default=200, help="item 4's simulated steps")
    ap.add_argument("--sim-seeds", type=int, default=3, help="item 6's simulator seeds")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    out = a.out
    out.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    summary: dict = {}

    # 1. calibration
    cost = out / "run_cost.json"
    cal = out / "calibration.json"
    for p in (cost, cal):
        p.unlink(missing_ok=True)
    cli(["calibrate", "run-cost", str(a.cal), "--out", str(cost)], log)
    cli(["calibrate", "groups", str(a.cal / "rollouts.parquet"), "--cost-from", str(cost),
         "--name", "smollm2-135m-arithmetic", "--out", str(cal)], log)  # fmt: skip
    summary["calibration"] = {
        k: json.loads(cal.read_text())[k] for k in ("cost", "engine", "lengths", "defaults")
    }

    # 2. item 4: P(max/median > tau) per G on the held-out run, beside constant and lookup
    g_dir, s_dir = out / "groups_heldout", out / "spread_cal"
    cli(["compare", "groups", str(a.cal / "rollouts.parquet"), "--held-out",
         str(a.held / "rollouts.parquet"), "--tau", TAUS, "--out", str(g_dir)], log)  # fmt: skip
    val = pl.read_csv(g_dir / "validation_groups.csv").filter(pl.col("model") == "hierarchical")
    # CAL's own P per G: run-spread of CAL against itself measures each G on every step
    cli(["compare", "run-spread", str(a.cal / "rollouts.parquet"),
         str(a.cal / "rollouts.parquet"), "--tau", TAUS, "--out", str(s_dir)], log)  # fmt: skip
    own = (
        pl.read_csv(s_dir / "run_spread.csv")
        .filter(pl.col("run") == 0)
        .select("G", "tau", pl.col("p_straggler_meas").alias("p_cal"))
    )
    g_log = int(own["G"].max())
    at_log = own.filter(pl.col("G") == g_log).select("tau", pl.col("p_cal").alias("p_const"))
    table = (
        val.join(own, on=["G", "tau"], how="left")
        .join(at_log, on="tau")
        .with_columns(pl.col("p_cal").fill_null(pl.col("p_const")).alias("p_lookup"))
        .with_columns(
            (pl.col("p_const") - pl.col("p_straggler_meas")).abs().alias("err_constant"),
            (pl.col("p_lookup") - pl.col("p_straggler_meas")).abs().alias("err_lookup"),
        )
        .select(
            "G",
            "tau",
            "p_straggler_meas",
            "p_straggler_meas_se",
            "p_straggler_pred",
            "abs_error",
            "p_const",
            "err_constant",
            "p_lookup",
            "err_lookup",
        )  # fmt: skip
        .sort("tau", "G")
    )
    table.write_csv(out / "item4_p_straggler.csv", float_precision=4)
    summary["item4"] = {
        "cells": table.height,
        "within_0.10": int((table["abs_error"] <= 0.10).sum()),
        "mean_abs_error": float(table["abs_error"].mean()),
        "mean_err_constant": float(table["err_constant"].mean()),
        "mean_err_lookup": float(table["err_lookup"].mean()),
        "beats_constant": int((table["abs_error"] < table["err_constant"]).sum()),
        "beats_lookup": int((table["abs_error"] < table["err_lookup"]).sum()),
    }
    held = run_row(a.held, a.tau)
    calr = run_row(a.cal, a.tau)
    G_held = round(held["mean_G"])
    sst, _ = sim_steps(cal, f"static:{G_held}", 4, a.sim_steps, out / "sim_held", log)
    sim_q = quantiles((sst["t_end"] - sst["t_start"]).to_numpy())
    ratio = G_held / calr["mean_G"]
    summary["item4_step_time"] = {
        "measured": held["step_s"],
        "simulated": sim_q,
        "constant_scaled": {k: v * ratio for k, v in calr["step_s"].items()},
        "cal_run_unscaled": calr["step_s"],
    }

    # 3. item 5: compare idle on each run, both clocks
    rows = []
    for r in [Path(p) for p in a.idle.split(",") if p]:
        for clock in ("cpu", "wall"):
            d = out / f"idle_{r.name}_{clock}"
            cli(["compare", "idle", "--real", str(r), "--clock", clock, "--out", str(d)], log)
            for s in json.loads((d / "idle_summary.json").read_text())["summary"]:
                if s["scope"] == "all":
                    rows.append({"run": r.name, "clock": clock, **s})
    if rows:
        idle = pl.DataFrame(rows)
        idle.write_csv(out / "item5_idle.csv", float_precision=4)
        summary["item5"] = idle.select(
            "run", "clock", "prediction", "held_out_steps", "makespan_mdape", "idle_mae"
        ).to_dicts()

    # 4. item 6: controllers, measured beside simulated
    ctl = []
    for item in [x for x in a.controller.split(",") if x]:
        spec, run_dir = item.split("=", 1)
        meas = run_row(Path(run_dir), a.tau)
        # as many simulated steps as measured (SAGC's G depends on how far it got),
        # over --sim-seeds seeds of the simulator
        sims = [
            sim_steps(
                cal, spec, 4, meas["steps"], out / f"sim_{spec.replace(':', '')}_s{s}", log, s
            )
            for s in range(a.sim_seeds)
        ]
        st = pl.concat([x[0] for x in sims])
        m = pl.concat([step_metrics(x[1], a.tau) for x in sims])
        ctl.append(
            {
                "controller": spec,
                "straggler_rate_meas": meas["straggler_rate"],
                "straggler_rate_pred": float(m["straggler"].mean()),
                "mean_G_meas": meas["mean_G"],
                "mean_G_pred": float(m["group_size"].mean()),
                "step_s_median_meas": meas["step_s"]["median"],
                "step_s_median_pred": float((st["t_end"] - st["t_start"]).median()),
                "sim_seeds": a.sim_seeds,
                "accuracy_start": meas["accuracy_start"],
                "accuracy_end": meas["accuracy_end"],
                "steps_meas": meas["steps"],
            }
        )
    if ctl:
        pl.DataFrame(ctl).write_csv(out / "item6_controllers.csv", float_precision=4)
        summary["item6"] = ctl

    runs = {Path(p) for p in [a.cal, a.held, *a.idle.split(","), *a.runs.split(",")] if p}
    runs |= {Path(x.split("=", 1)[1]) for x in a.controller.split(",") if x}
    summary["runs"] = [run_row(r, a.tau) for r in sorted(runs)]
    summary["commands"] = log
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=float))
    print(json.dumps({k: summary[k] for k in summary if k != "calibration"}, indent=1))


if __name__ == "__main__":
    main()
