"""Does a run-cost calibration fitted at one (G, B) price a run at another G?
(docs/real_lm.md, "A learner that scales with G").

For each ``CAL=HELD`` pair (two synchronous runs of static G, the same B):

1. ``calibrate run-cost CAL`` (the learner priced per token through the origin when the
   steps do not identify its slope) and ``calibrate groups CAL/rollouts.parquet
   --cost-from`` it: the calibration;
2. the same calibration with the learner fitted as the NNLS line whatever the steps
   identify (:func:`analysis.idle.run_cost.run_cost` with ``min_slope_t=None``, the rule
   before; on a one-G run it comes out a constant): ``calibration_nnls.json``;
3. ``sim --calibration`` of each at HELD's G and B (``static:G``, ``--sim-steps`` steps,
   or as many as HELD ran with ``--sim-steps 0``; seeds ``0 .. --sim-seeds - 1``): the
   median simulated step time (``t_end - t_start``) over the seeds' steps pooled. (The
   fitted lengths drift per step, ``mu_growth_per_step``: 200 steps extrapolate a 12- or
   24-step run's drift far past what it measured.)
4. HELD's measured median step time beside them and beside two naive rules made from
   CAL's measured median step time: times ``G_held / G_cal`` (``x G ratio``) and unchanged
   (``constant``). Errors are ``predicted / measured - 1``. With ``--floor ROOT``, the
   run of HELD's name under ROOT (a repeat of the same setting) gives the repeat floor
   ``|repeat / measured - 1|``.

Writes ``transfer.csv`` (one row a pair) and ``summary.json`` (mean |error| per rule, the
commands run) under ``--out``. Nothing here runs a model: calibrations and ``sim`` only.

Usage: ``python bench/run_cost_transfer.py --pair CAL=HELD [--pair ...] --out DIR``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

import polars as pl
from rolloutlab.analysis.idle.run_cost import run_cost
from rolloutlab.analysis.inputs.run_input import load_run

RULES = ("calibrated", "nnls", "g_ratio", "constant")


def cli(args: list[str], log: list[str]) -> str:
    """Run ``rolloutlab ARGS`` with this interpreter; returns stdout, exits on failure."""
    log.append("rolloutlab " + " ".join(shlex.quote(a) for a in args))
    print("$", log[-1], flush=True)
    res = subprocess.run(
        [sys.executable, "-m", "rolloutlab", *args], capture_output=True, text=True
    )
    if res.returncode != 0:
        raise SystemExit(f"{log[-1]} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return res.stdout


def setting(run_dir: Path) -> tuple[int, int, float]:
    """``(G, B, median step s)`` of a measured static-G run."""
    cfg = json.loads((run_dir / "config.json").read_text())["config"]
    G = int(str(cfg["controller"]).removeprefix("static:"))
    st = pl.read_parquet(run_dir / "steps.parquet")
    return G, int(cfg["prompts"]), float((st["t_end"] - st["t_start"]).median())


def sim_median_s(
    cal: Path, G: int, B: int, steps: int, seeds: int, out: Path, log: list[str]
) -> float:
    """Median simulated step time (s) of ``static:G`` at ``B`` prompts under ``cal``, over
    the steps of seeds ``0 .. seeds - 1`` pooled."""
    step_s = []
    for seed in range(seeds):
        d = out if seeds == 1 else out / f"seed{seed}"
        cli(
            ["sim", "--calibration", str(cal), "--controller", f"static:{G}", "--prompts",
             str(B), "--steps", str(steps), "--seed", str(seed), "--no-figure", "--out", str(d)],
            log,
        )  # fmt: skip
        st = pl.read_parquet(d / "steps.parquet")
        step_s.append(st["t_end"] - st["t_start"])
    return float(pl.concat(step_s).median())


def one_pair(
    cal_dir: Path,
    held_dir: Path,
    steps: int,
    seeds: int,
    out: Path,
    log: list[str],
    floor: Path | None,
) -> dict:
    """One row of ``transfer.csv`` (module docstring)."""
    out.mkdir(parents=True, exist_ok=True)
    g_cal, b_cal, cal_s = setting(cal_dir)
    g_held, b_held, held_s = setting(held_dir)
    steps = steps or pl.read_parquet(held_dir / "steps.parquet").height
    if b_cal != b_held:
        raise SystemExit(f"{cal_dir} has B {b_cal}, {held_dir} B {b_held}: a pair shares B")
    cost, cal = out / "run_cost.json", out / "calibration.json"
    for p in (cost, cal):
        p.unlink(missing_ok=True)
    printed = cli(["calibrate", "run-cost", str(cal_dir), "--out", str(cost)], log)
    cli(["calibrate", "groups", str(cal_dir / "rollouts.parquet"), "--cost-from", str(cost),
         "--out", str(cal)], log)  # fmt: skip
    doc = json.loads(cal.read_text())
    nnls, _, _ = run_cost(load_run(cal_dir), min_slope_t=None)
    doc_nnls = {**doc, "name": doc["name"] + "-nnls"}
    doc_nnls["cost"] = {
        **doc["cost"],
        **{k: nnls[k] for k in ("learner_const_s", "learner_s_per_token")},
    }
    cal_nnls = out / "calibration_nnls.json"
    cal_nnls.write_text(json.dumps(doc_nnls, indent=1))
    pred = {
        "calibrated": sim_median_s(cal, g_held, b_held, steps, seeds, out / "sim", log),
        "nnls": sim_median_s(cal_nnls, g_held, b_held, steps, seeds, out / "sim_nnls", log),
        "g_ratio": cal_s * g_held / g_cal,
        "constant": cal_s,
    }
    fit = json.loads(cost.read_text())["fit"]
    return {
        "cal": cal_dir.name,
        "held": held_dir.name,
        "G_cal": g_cal,
        "G_held": g_held,
        "B": b_held,
        "sim_steps": steps,
        "cal_step_s": cal_s,
        "held_step_s": held_s,
        **{f"pred_{r}_s": v for r, v in pred.items()},
        **{f"err_{r}": v / held_s - 1.0 for r, v in pred.items()},
        "repeat_floor": (
            abs(setting(floor / held_dir.name)[2] / held_s - 1.0) if floor else float("nan")
        ),
        "learner_rule": fit["learner_rule"],
        "learner_slope_t": fit["learner_slope_t"],
        "learner_tokens_cv": fit["learner_tokens_cv"],
        "learner_s_per_token": doc["cost"]["learner_s_per_token"],
        "nnls_learner_const_s": nnls["learner_const_s"],
        "nnls_learner_s_per_token": nnls["learner_s_per_token"],
        "printed": printed.strip().splitlines()[-1],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", action="append", required=True, help="CAL_RUN=HELD_RUN")
    ap.add_argument("--sim-steps", type=int, default=200, help="0: as many as HELD ran")
    ap.add_argument("--sim-seeds", type=int, default=1)
    ap.add_argument("--floor", type=Path, default=None, help="root of repeats of HELD runs")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    if (a.out / "transfer.csv").exists():
        raise SystemExit(f"{a.out}/transfer.csv exists: finished results are not overwritten")
    log: list[str] = []
    rows = []
    for item in a.pair:
        cal_dir, held_dir = (Path(p) for p in item.split("=", 1))
        rows.append(
            one_pair(
                cal_dir,
                held_dir,
                a.sim_steps,
                a.sim_seeds,
                a.out / f"{cal_dir.name}__{held_dir.name}",
                log,
                a.floor,
            )
        )
        pl.DataFrame(rows).write_csv(a.out / "transfer_partial.csv", float_precision=4)
    table = pl.DataFrame(rows)
    table.write_csv(a.out / "transfer.csv", float_precision=4)
    (a.out / "transfer_partial.csv").unlink()
    summary = {
        "pairs": len(rows),
        "sim_steps": a.sim_steps,
        "sim_seeds": a.sim_seeds,
        "mean_abs_error": {r: float(table[f"err_{r}"].abs().mean()) for r in RULES},
        "mean_repeat_floor": float(table["repeat_floor"].mean()),
        "commands": log,
    }
    (a.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary["mean_abs_error"], indent=1))


if __name__ == "__main__":
    main()
