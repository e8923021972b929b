"""Run the forecast's evaluation plan (docs/per_sample.md, "Forecasting later steps").

Per-sample runs (tests/data/groups): graph-walk and digit-chain seeds 0-3 (K = 100, the
other three seeds give the floor) and real_sync (K = 20, no floor); the public verl
TensorBoard runs (K = 50, forecast response_length/mean and /max). Writes, under --out:
``cells_<run>.csv``, ``makespan_<run>.csv``, ``verl_<run>.csv`` and ``summary.md``.
About 10-15 minutes on one shared core.

    python bench/forecast_validation.py --out runs/forecast
    python bench/forecast_validation.py --out runs/forecast_verl --only verl
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from rolloutlab.calibration.readers.grouped import read_grouped
from rolloutlab.calibration.readers.verl_tb import read_run
from rolloutlab.calibration.validation.forecast import (
    RULES,
    ForecastConfig,
    cell_errors,
    forecast_aggregates,
    forecast_groups,
    makespan_errors,
    measured,
    meets_target,
)

ROOT = Path(__file__).resolve().parents[1]
GROUPS = ROOT / "tests" / "data" / "groups"
TB_DEFAULT = ROOT.parent / "shared" / "data" / "verl_async_reward_grpo_tb" / "raw"

TASKS = {
    "graph_walk": ((4.0, 12.0, 16.0, 20.0), 100),
    "digit_chain": ((1.5, 2.0, 2.5, 3.0), 100),
}
"""Task -> (taus, K) of the plan; seeds 0-3 each."""

SEED_DIRS = {0: "{task}", 1: "{task}_seed1", 2: "{task}_seed2", 3: "{task}_seed3"}


def _fmt(v: float) -> str:
    return "-" if v != v else f"{v:.3f}"


def group_line(group: str, errors: dict[str, dict[str, float]], unit: str = "") -> str:
    """One markdown row of the plan's pass rule over a group of runs: ``errors`` maps a
    run to each rule's error; the best naive rule is the one with the least mean error
    over the runs; the margin is its mean error less the forecast's (positive: the
    forecast wins), with the smallest and largest per-run margin and the runs won."""
    runs = list(errors)
    mean = {r: float(np.mean([errors[x][r] for x in runs])) for r in RULES}
    best = min(RULES[1:], key=lambda r: mean[r])
    margins = [errors[x][best] - errors[x]["forecast"] for x in runs]
    won = sum(m > 0 for m in margins)
    verdict = "passes" if mean["forecast"] < mean[best] else "does not pass"
    return (
        f"| {group} | {len(runs)} | {mean['forecast']:.3f}{unit} | {best} {mean[best]:.3f}{unit} | "
        f"{mean[best] - mean['forecast']:+.3f} ({min(margins):+.3f} to {max(margins):+.3f}) | "
        f"{won} of {len(runs)} | {verdict} |"
    )


GROUP_HEADER = [
    "",
    "| group | runs | forecast | best naive rule | margin (per-run range) | runs won | pass rule |",
    "|---|---|---|---|---|---|---|",
]


def per_sample(out: Path, lines: list[str], horizon: int | None = None) -> None:
    """The per-sample runs of the plan; appends markdown table rows to ``lines``."""
    lines += [
        "Per-sample runs: mean absolute error of P(max/median > tau) over the scored cells "
        "(held-out steps); makespan MAE in tokens",
        "",
        "| run | K | scored cells | forecast | persistence | linear | static | floor | "
        "cells within target | makespan MAE (tokens): forecast / persistence / linear / static |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    runs = []
    for task, (taus, K) in TASKS.items():
        paths = {s: GROUPS / d.format(task=task) / "samples.parquet" for s, d in SEED_DIRS.items()}
        traces = {s: read_grouped([p]) for s, p in paths.items()}
        cfg = ForecastConfig(fit_steps=K, taus=taus, horizon=horizon)
        meas = {s: measured(t, cfg) for s, t in traces.items()}
        for s in traces:
            others = [(traces[o], meas[o]) for o in traces if o != s]
            runs.append((f"{task}_s{s}", traces[s], cfg, others, meas[s]))
    cfg = ForecastConfig(fit_steps=20, taus=(2.5, 3.0, 4.0), horizon=horizon)
    runs.append(("real_sync", read_grouped([GROUPS / "real_sync"]), cfg, [], None))
    p_err: dict[str, dict] = {}
    span_err: dict[str, dict] = {}
    for name, trace, cfg, others, meas_run in runs:
        cells, span = forecast_groups(trace, cfg, others, meas_run)
        K = cfg.fit_steps
        cells.write_csv(out / f"cells_{name}.csv")
        span.write_csv(out / f"makespan_{name}.csv")
        e, m = cell_errors(cells), makespan_errors(span)
        p_err[name], span_err[name] = e, m
        ok, n = meets_target(cells)
        lines.append(
            f"| {name} | {K} | {n} | "
            + " | ".join(_fmt(e[r]) for r in RULES)
            + f" | {_fmt(e.get('floor', float('nan')))} | {ok} of {n} | "
            + " / ".join(f"{m[r]:.1f}" for r in RULES)
            + " |"
        )
        print(lines[-1], flush=True)
    lines += GROUP_HEADER
    for group in ("graph_walk", "digit_chain", "real_sync"):
        names = [r for r in p_err if r.startswith(group)]
        lines.append(group_line(f"{group}: P(straggler)", {r: p_err[r] for r in names}))
        lines.append(group_line(f"{group}: makespan", {r: span_err[r] for r in names}, " tok"))


def verl(out: Path, tb_dir: Path, lines: list[str], K: int = 50, cap: int = 1024) -> None:
    """The verl TensorBoard runs of the plan; appends markdown table rows to ``lines``."""
    lines += [
        *([""] if lines else []),
        f"verl runs: mean absolute error (tokens) of response_length/mean and /max over the "
        f"held-out steps after K = {K}",
        "",
        "| verl run | mean MAE (tokens): forecast / persistence / linear / static | "
        "max MAE (tokens): forecast / persistence / linear / static |",
        "|---|---|---|",
    ]
    by_metric: dict[str, dict] = {"mean": {}, "max": {}}
    for run in sorted(p for p in tb_dir.iterdir() if p.is_dir()):
        rows = forecast_aggregates(read_run(run), K, cap)
        rows.write_csv(out / f"verl_{run.name}.csv")
        cols = []
        for metric in ("mean", "max"):
            err = {
                r: float((rows[f"{metric}_{r}"] - rows[f"{metric}_meas"]).abs().mean())
                for r in RULES
            }
            by_metric[metric][run.name] = err
            cols.append(" / ".join(f"{err[r]:.1f}" for r in RULES))
        lines.append(f"| {run.name} | {cols[0]} | {cols[1]} |")
        print(lines[-1], flush=True)
    lines += GROUP_HEADER
    for metric, errors in by_metric.items():
        lines.append(group_line(f"verl response_length/{metric}", errors, " tok"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="folder for the CSVs and summary.md")
    ap.add_argument("--tb-dir", type=Path, default=TB_DEFAULT, help="verl TensorBoard run folders")
    ap.add_argument("--only", choices=("groups", "verl"), help="one half of the plan")
    ap.add_argument(
        "--horizon",
        type=int,
        default=None,
        help="per-sample runs: forecast only the first H steps after K (not the plan: all)",
    )
    args = ap.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        ap.error(f"--out {args.out} is not empty; results are never overwritten")
    if args.only != "groups" and not args.tb_dir.is_dir():
        ap.error(f"--tb-dir {args.tb_dir}: no such folder (give the verl TensorBoard runs)")
    if args.horizon is not None and args.horizon < 1:
        ap.error(f"--horizon {args.horizon}: needs an integer >= 1")
    args.out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    if args.only != "verl":
        per_sample(args.out, lines, args.horizon)
    if args.only != "groups":
        verl(args.out, args.tb_dir, lines)
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
