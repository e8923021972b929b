"""SAGC with a forecast prior against plain SAGC on a drifting scenario (issue: SAGC with
a forecast; docs/per_sample.md, "SAGC with a forecast prior").

The scenario drifts: graph-walk seeds 1-3, step-indexed empirical lengths (a simulated
step draws from the logged groups of the 30 steps around it; make it with
``rolloutlab calibrate groups <seeds 1-3> --length-model empirical --step-window 30``).
The prior: the drifting length model (:mod:`calibration.fits.drift_fit`) fitted on the
first 100 steps of a pilot run (graph-walk seed 0, never simulated), its forecast
``P(max/median > tau)`` at G = 4, 8, 16 for step ``--prior-step``, given to SAGC as
``prior_p`` (``prior_n`` pseudo-steps). The per-prompt length history variant
(``sagc:length_history=N``, :mod:`sim.control.length_history`; ``--length-history N``,
0 to leave it out) runs beside them, alone and with ``forget=to_prior``. Each controller runs ``--steps`` steps for each
seed; reported: the straggler rate at ``tau`` (steps with max/median > tau) over all
steps and over steps 100 on, its distance from ``delta``, and the mean G.

    python bench/sagc_forecast_prior.py --calibration /tmp/gw123_s30.json --out runs/sagc_prior
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl
from rolloutlab.calibration.fits.drift_fit import fit_drift, summarise_groups
from rolloutlab.calibration.readers.grouped import read_grouped
from rolloutlab.calibration.validation.forecast import model_p
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.scenario import load_scenario
from rolloutlab.sim.studies.compare import plan_comparison, run_comparison

ROOT = Path(__file__).resolve().parents[1]
PILOT = ROOT / "tests" / "data" / "groups" / "graph_walk" / "samples.parquet"
CANDIDATES = (4, 8, 16)


def forecast_prior(tau: float, step: int, fit_steps: int = 100) -> tuple[float, ...]:
    """The pilot's forecast ``P(max/median > tau)`` at each candidate G at ``step``."""
    trace = read_grouped([PILOT])
    groups, steps = trace.groups("length"), trace.steps()
    summary = summarise_groups(steps[:fit_steps], groups[:fit_steps], trace.known_cap())
    drift = fit_drift(summary, fit_steps // 2)  # the forecast check's window, K // 2
    p, _ = model_p(drift.lengths_model([step]), [step], 16, 16, 16, (tau,), 400, 1)
    return tuple(round(float(p[0, g - 1, 0]), 3) for g in CANDIDATES)


def straggler_rates(rollouts: pl.DataFrame, tau: float, from_step: int) -> pl.DataFrame:
    """Per controller: the straggler rate at ``tau`` over all steps and from ``from_step``,
    and the mean G (``rollouts``: the simulator's trace, ``run_id`` = the spec)."""
    per_step = rollouts.group_by("run_id", "step").agg(
        (pl.col("response_tokens").max() / pl.col("response_tokens").median()).alias("ratio"),
        pl.col("group_size").first().alias("G"),
    )
    return per_step.group_by("run_id", maintain_order=True).agg(
        (pl.col("ratio") > tau).mean().alias("rate_all"),
        (pl.col("ratio") > tau).filter(pl.col("step") >= from_step).mean().alias("rate_late"),
        pl.col("G").mean().alias("mean_G"),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", required=True, type=Path, help="the drifting scenario")
    ap.add_argument("--out", required=True, type=Path, help="folder for rates.csv")
    ap.add_argument("--tau", type=float, default=16.0)
    ap.add_argument("--delta", type=float, default=0.3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--prior-step", type=int, default=150)
    ap.add_argument("--prior-n", type=float, default=10.0)
    ap.add_argument(
        "--length-history",
        type=int,
        default=4,
        help="steps of groups the length-history variant keeps (0: leave it out)",
    )
    args = ap.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        ap.error(f"--out {args.out} is not empty; results are never overwritten")
    prior = forecast_prior(args.tau, args.prior_step)
    base = f"sagc:tau={args.tau},delta={args.delta},candidates=4/8/16"
    prior_opt = f",prior_p={'/'.join(map(str, prior))},prior_n={args.prior_n}"
    specs = [
        base,
        base + prior_opt,
        base + ",forget=to_prior",
        base + ",forget=to_prior" + prior_opt,
    ]
    if args.length_history:
        hist = f",length_history={args.length_history}"
        specs += [base + hist, base + ",forget=to_prior" + hist]
    scenario = load_scenario(args.calibration)
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        cfg = RunConfig(steps=args.steps, prompts=16, seed=seed)
        rollouts = run_comparison(plan_comparison(scenario, specs, cfg, engine="fast")).rollouts
        rollouts = rollouts.collect() if isinstance(rollouts, pl.LazyFrame) else rollouts
        rows.append(
            straggler_rates(rollouts, args.tau, 100).with_columns(pl.lit(seed).alias("seed"))
        )
        print(rows[-1], flush=True)
    table = pl.concat(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    table.write_csv(args.out / "rates.csv")
    summary = table.group_by("run_id", maintain_order=True).agg(
        pl.col("rate_all").mean(),
        pl.col("rate_all").std().alias("rate_all_sd"),
        pl.col("rate_late").mean(),
        pl.col("rate_late").std().alias("rate_late_sd"),
        (pl.col("rate_late") - args.delta).abs().mean().alias("late_abs_from_delta"),
        pl.col("mean_G").mean(),
    )
    print(f"prior_p (forecast at step {args.prior_step}, tau {args.tau}): {prior}")
    with pl.Config(tbl_rows=-1, tbl_width_chars=200, fmt_str_lengths=90, float_precision=3):
        print(summary)
    summary.write_csv(args.out / "summary.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
