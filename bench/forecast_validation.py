"""Run the forecast's evaluation plans (docs/per_sample.md, "Forecasting later steps" and
"A local level forecast").

``--runs fresh`` (the default, the second plan): the local level forecast on runs no
earlier look saw — graph-walk and digit-chain seeds 4-5 (K = 100; the floor from every
other bundled seed of the configuration; seed 5 was not finished in time, so it is named
and left out) and real_sync seeds 1-2 (K = 20; floor from seeds
0-2), bundled under tests/data/groups — and on verl's console logs of
``--console-dir`` (K = 50; forecast ``response_length/mean`` and ``/max``); the verl
TensorBoard runs of ``--tb-dir`` are a second look. ``--runs earlier``: the first plan's
runs (graph-walk and digit-chain seeds 0-3, real_sync seed 0). ``--model drift``: the
drifting length model instead. ``--runs third --model backtest`` (the third plan, "A
backtest combination"): graph-walk and digit-chain seeds 6-7 and real_sync seeds 3-4,
made after that plan was committed, the floor from every bundled seed; ``--runs seen``:
the runs the first two plans looked at (the third plan's in-sample set). Writes, under
--out: ``cells_<run>.csv``, ``makespan_<run>.csv``, ``verl_<run>.csv`` and ``summary.md``.

    python bench/forecast_validation.py --out runs/forecast_fresh
    python bench/forecast_validation.py --out runs/forecast --runs earlier --model drift
    python bench/forecast_validation.py --out runs/forecast_third --runs third --model backtest --only groups
    python bench/forecast_validation.py --out runs/forecast_verl --only verl
    python bench/forecast_validation.py --out runs/forecast_verl_unseen --only console --console-dir DIR

``--only console``: the console logs of ``--console-dir`` alone (no TensorBoard half), as the
confirmatory test on unseen public verl logs reads them (docs/per_sample.md).

From a plain clone the TensorBoard half reads the two runs bundled under tests/data/verl_tb
and the console half is skipped with a line naming the missing folder.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np
from rolloutlab.calibration.readers.grouped import read_grouped
from rolloutlab.calibration.readers.verl_console import read_console_log
from rolloutlab.calibration.readers.verl_tb import read_run
from rolloutlab.calibration.validation.forecast import (
    INFORMATIVE,
    MODELS,
    RULES,
    ForecastConfig,
    cell_errors,
    forecast_aggregates,
    forecast_groups,
    makespan_errors,
    measured,
    meets_target,
)

from rolloutlab.commands.options.common import renamed_argument

ROOT = Path(__file__).resolve().parents[1]
GROUPS = ROOT / "tests" / "data" / "groups"
SHARED = ROOT.parent / "shared" / "data"
TB_SHARED = SHARED / "verl_async_reward_grpo_tb" / "raw"
TB_BUNDLED = ROOT / "tests" / "data" / "verl_tb"
CONSOLE_SHARED = SHARED / "verl_data_gsm8k_ppo_logs"

TASKS = {
    "graph_walk": ((4.0, 12.0, 16.0, 20.0), 100),
    "digit_chain": ((1.5, 2.0, 2.5, 3.0), 100),
    "real_sync": ((2.5, 3.0, 4.0), 20),
}
"""Configuration -> (taus, K) of the plans."""

SEEDS = {
    "earlier": {"graph_walk": (0, 1, 2, 3), "digit_chain": (0, 1, 2, 3), "real_sync": (0,)},
    "fresh": {"graph_walk": (4, 5), "digit_chain": (4, 5), "real_sync": (1, 2)},
    "seen": {"graph_walk": (0, 1, 2, 3, 4), "digit_chain": (0, 1, 2, 3, 4), "real_sync": (0, 1, 2)},
    "third": {"graph_walk": (6, 7), "digit_chain": (6, 7), "real_sync": (3, 4)},
}
"""Which seeds each plan forecasts (``seen``: every run the first two plans looked at, the
third plan's in-sample set)."""

FLOOR_SEEDS = {
    "earlier": SEEDS["earlier"],
    "fresh": {"graph_walk": range(6), "digit_chain": range(6), "real_sync": range(3)},
    "seen": SEEDS["seen"],
    "third": {"graph_walk": range(32), "digit_chain": range(32), "real_sync": range(32)},
}
"""The bundled seeds each plan's floor reads (a run's floor: its distance from the mean of
the others)."""

EWM_HALF_LIFE = 7.0
"""The second plan's exploratory rule (reported, not counted): an exponentially weighted
mean of the fit steps' P with this half-life in steps, the best of ten half-lives on the
earlier runs (chosen on them, so it is in-sample there)."""


def run_dir(config: str, seed: int) -> Path:
    """The bundled folder of a configuration's seed (seed 0 has no suffix)."""
    return GROUPS / (config if seed == 0 else f"{config}_seed{seed}")


def run_file(config: str, seed: int) -> Path:
    """What :func:`read_grouped` reads of a bundled seed: its ``samples.parquet``, else
    the folder (a run folder holding ``rollouts.parquet``)."""
    samples = run_dir(config, seed) / "samples.parquet"
    return samples if samples.exists() else run_dir(config, seed)


def bundled_seeds(config: str) -> list[int]:
    """Seeds of ``config`` bundled under tests/data/groups."""
    return [s for s in range(32) if run_dir(config, s).is_dir()]


def ewm_error(meas: np.ndarray, K: int, held: slice) -> float:
    """Mean absolute error over the scored cells of the exploratory rule
    (:data:`EWM_HALF_LIFE`) on ``(T, G, tau)`` measured P, fit steps ``:K``."""
    w = 0.5 ** (np.arange(K)[::-1] / EWM_HALF_LIFE)
    pred = np.tensordot(w / w.sum(), meas[:K], axes=(0, 0))
    p_meas = meas[held].mean(axis=0)
    scored = (p_meas >= INFORMATIVE[0]) & (p_meas <= INFORMATIVE[1])
    return float(np.abs(pred - p_meas)[scored].mean()) if scored.any() else float("nan")


def within(cells, bound: float = 0.10) -> int:
    """Scored cells whose forecast P is within ``bound`` of the measured P."""
    s = cells.filter(cells["scored"])
    return int(((s["p_forecast"] - s["p_meas"]).abs() <= bound).sum())


def _fmt(v: float) -> str:
    return "-" if v != v else f"{v:.3f}"


def config_of(run: str) -> str:
    """The configuration of a run named ``<config>_s<seed>``."""
    return run.rsplit("_s", 1)[0]


def group_line(
    group: str,
    errors: dict[str, dict[str, float]],
    unit: str = "",
    need: float = 0.0,
    relative: bool = False,
    half: bool = False,
    per_config: bool = False,
) -> str:
    """One markdown row of a plan's pass rule over a group of runs: ``errors`` maps a
    run to each rule's error; the best naive rule is the one with the least mean error
    over the runs (``per_config``: over each configuration's runs, :func:`config_of`, so
    a run is compared with its own configuration's best rule, chosen in hindsight); the
    margin is its mean error less the forecast's (positive: the forecast wins), with the
    smallest and largest per-run margin and the runs won. The forecast passes when the
    margin is above 0 and at least ``need`` (a share of the best rule's error when
    ``relative``) and, with ``half``, it wins at least half the runs."""
    runs = list(errors)
    pools: dict[str, list[str]] = {}
    for x in runs:
        pools.setdefault(config_of(x) if per_config else "", []).append(x)
    best = {
        c: min(RULES[1:], key=lambda r, xs=xs: float(np.mean([errors[x][r] for x in xs])))
        for c, xs in pools.items()
    }
    bench = {x: errors[x][best[config_of(x) if per_config else ""]] for x in runs}
    margins = [bench[x] - errors[x]["forecast"] for x in runs]
    won = sum(m > 0 for m in margins)
    forecast = float(np.mean([errors[x]["forecast"] for x in runs]))
    benchmark = float(np.mean(list(bench.values())))
    margin = benchmark - forecast
    bar = need * benchmark if relative else need
    ok = margin > 0 and margin >= bar and (not half or 2 * won >= len(runs))
    verdict = "passes" if ok else "does not pass"
    label = (
        f"each configuration's best ({', '.join(f'{c} {r}' for c, r in best.items())})"
        if per_config
        else best[""]
    )
    return (
        f"| {group} | {len(runs)} | {forecast:.3f}{unit} | {label} {benchmark:.3f}{unit} | "
        f"{margin:+.3f} ({min(margins):+.3f} to {max(margins):+.3f}) | "
        f"{won} of {len(runs)} | {verdict} |"
    )


PASS = {
    "earlier": {"p": {}, "span": {}, "verl": {}},
    "fresh": {
        "p": {"need": 0.010, "half": True},
        "span": {"need": 0.5, "half": True},
        "verl": {"need": 0.02, "relative": True, "half": True},
    },
}
PASS["seen"] = PASS["third"] = PASS["fresh"]
"""Each plan's pass rule (docs/per_sample.md): the margin needed over the best naive rule
for P, the makespan and verl's metrics, and whether half the runs must be won."""


GROUP_HEADER = [
    "",
    "| group | runs | forecast | best naive rule | margin (per-run range) | runs won | pass rule |",
    "|---|---|---|---|---|---|---|",
]


def measured_cached(config: str, seed: int, trace, cfg: ForecastConfig, cache: Path | None):
    """:func:`measured` of a bundled run, kept in ``cache`` (None: not kept) under a name
    holding the run's file digest, the taus, draws and seed (a changed file is measured
    again)."""
    if cache is None:
        return measured(trace, cfg)
    src = run_file(config, seed)
    files = sorted(src.rglob("*")) if src.is_dir() else [src]
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in files if f.is_file())).hexdigest()
    taus = "-".join(f"{t:g}" for t in cfg.taus)
    path = cache / f"{config}_s{seed}_{digest[:16]}_t{taus}_d{cfg.draws}_r{cfg.seed}.npy"
    if path.exists():
        return np.load(path)
    m = measured(trace, cfg)
    cache.mkdir(parents=True, exist_ok=True)
    np.save(path, m)
    return m


def per_sample(
    out: Path,
    lines: list[str],
    plan: str,
    model: str,
    horizon: int | None = None,
    cache: Path | None = None,
) -> None:
    """The per-sample runs of ``plan`` (:data:`SEEDS`); appends markdown rows to ``lines``
    (``cache``: :func:`measured_cached`)."""
    lines += [
        f"Per-sample runs ({plan}; forecast model {model}): mean absolute error of "
        "P(max/median > tau) over the scored cells (held-out steps); makespan MAE in tokens",
        "",
        "| run | K | scored cells | forecast | persistence | linear | static | floor | "
        "cells within target | cells within 0.10 | "
        f"EWM half-life {EWM_HALF_LIFE:g} (exploratory) | "
        "makespan MAE (tokens): forecast / persistence / linear / static |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    p_err: dict[str, dict] = {}
    span_err: dict[str, dict] = {}
    for config, (taus, K) in TASKS.items():
        have = bundled_seeds(config)
        missing = [s for s in SEEDS[plan][config] if s not in have]
        if missing:
            lines.append(f"| {config} seeds {missing} | not bundled under {GROUPS}: left out | |")
            print(lines[-1], flush=True)
        cfg = ForecastConfig(fit_steps=K, taus=taus, horizon=horizon, model=model)
        pool = [s for s in have if s in FLOOR_SEEDS[plan][config]]
        traces = {s: read_grouped([run_file(config, s)]) for s in pool}
        meas = {s: measured_cached(config, s, t, cfg, cache) for s, t in traces.items()}
        for s in (s for s in SEEDS[plan][config] if s in pool):
            others = [(traces[o], meas[o]) for o in traces if o != s]
            name = f"{config}_s{s}"
            cells, span = forecast_groups(traces[s], cfg, others, meas[s])
            cells.write_csv(out / f"cells_{name}.csv")
            span.write_csv(out / f"makespan_{name}.csv")
            e, m = cell_errors(cells), makespan_errors(span)
            p_err[name], span_err[name] = e, m
            ok, n = meets_target(cells)
            end = None if horizon is None else K + horizon
            lines.append(
                f"| {name} | {K} | {n} | "
                + " | ".join(_fmt(e[r]) for r in RULES)
                + f" | {_fmt(e.get('floor', float('nan')))} | {ok} of {n} | "
                + f"{within(cells)} of {n} | "
                + f"{_fmt(ewm_error(meas[s], K, slice(K, end)))} | "
                + " / ".join(f"{m[r]:.1f}" for r in RULES)
                + " |"
            )
            print(lines[-1], flush=True)
    lines += GROUP_HEADER
    for group in TASKS:
        names = [r for r in p_err if r.startswith(group)]
        if names:
            lines.append(
                group_line(
                    f"{group}: P(straggler)", {r: p_err[r] for r in names}, **PASS[plan]["p"]
                )
            )
            lines.append(
                group_line(
                    f"{group}: makespan",
                    {r: span_err[r] for r in names},
                    " tok",
                    **PASS[plan]["span"],
                )
            )
    if p_err:
        lines.append(group_line("all per-sample runs: P(straggler)", p_err, **PASS[plan]["p"]))
        lines.append(
            group_line("all per-sample runs: makespan", span_err, " tok", **PASS[plan]["span"])
        )
        lines.append(
            group_line(
                "all per-sample runs: P(straggler), per configuration",
                p_err,
                per_config=True,
                **PASS[plan]["p"],
            )
        )
        lines.append(
            group_line(
                "all per-sample runs: makespan, per configuration",
                span_err,
                " tok",
                per_config=True,
                **PASS[plan]["span"],
            )
        )


def verl(
    out: Path,
    runs: dict[str, object],
    label: str,
    lines: list[str],
    model: str,
    plan: str = "fresh",
    K: int = 50,
    cap: int = 1024,
) -> None:
    """Forecast ``response_length/mean`` and ``/max`` of each run's steps after ``K``
    (``runs``: name -> step table); appends markdown rows headed by ``label``."""
    if not runs:
        print(f"note: no verl run ({label}); skipped", flush=True)
        return
    lines += [
        *([""] if lines else []),
        f"verl runs ({label}; forecast model {model}): mean absolute error (tokens) of "
        f"response_length/mean and /max over the held-out steps after K = {K}",
        "",
        "| verl run | mean MAE (tokens): forecast / persistence / linear / static | "
        "max MAE (tokens): forecast / persistence / linear / static |",
        "|---|---|---|",
    ]
    by_metric: dict[str, dict] = {"mean": {}, "max": {}}
    for name, table in runs.items():
        rows = forecast_aggregates(table, K, cap, model=model)
        rows.write_csv(out / f"verl_{name}.csv")
        cols = []
        for metric in ("mean", "max"):
            err = {
                r: float((rows[f"{metric}_{r}"] - rows[f"{metric}_meas"]).abs().mean())
                for r in RULES
            }
            by_metric[metric][name] = err
            cols.append(" / ".join(f"{err[r]:.1f}" for r in RULES))
        lines.append(f"| {name} | {cols[0]} | {cols[1]} |")
        print(lines[-1], flush=True)
    lines += GROUP_HEADER
    for metric, errors in by_metric.items():
        lines.append(
            group_line(
                f"verl response_length/{metric} ({label})", errors, " tok", **PASS[plan]["verl"]
            )
        )


def tb_runs(tb_dir: Path) -> dict[str, object]:
    """name -> step table of each run folder under ``tb_dir``."""
    return {p.name: read_run(p) for p in sorted(tb_dir.iterdir()) if p.is_dir()}


def console_runs(console_dir: Path) -> dict[str, object]:
    """name -> step table of each ``*.log`` under ``console_dir``."""
    return {p.stem: read_console_log(p) for p in sorted(console_dir.glob("*.log"))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="folder for the CSVs and summary.md")
    ap.add_argument(
        "--tb-dir",
        type=Path,
        default=None,
        help=f"verl TensorBoard run folders (default: {TB_SHARED} when present, else the "
        "two runs bundled under tests/data/verl_tb)",
    )
    ap.add_argument(
        "--console-dir",
        type=Path,
        default=None,
        help=f"verl console logs (*.log; default: {CONSOLE_SHARED} when present, else skipped)",
    )
    ap.add_argument(
        "--only",
        choices=("groups", "verl", "console"),
        help="one half of the plan (console: the verl console logs alone)",
    )
    ap.add_argument("--runs", choices=tuple(SEEDS), default="fresh", help="which plan's runs")
    ap.add_argument("--model", choices=MODELS, default=MODELS[0], help="the forecast model")
    ap.add_argument(
        "--measured-cache",
        type=Path,
        default=None,
        help="folder keeping each bundled run's measured per-step P (reused while the run's "
        "file is unchanged)",
    )
    new = ap.add_argument(
        "--forecast-steps",
        type=int,
        default=None,
        help="per-sample runs: forecast only the first H steps after K (not the plan: all)",
    )
    renamed_argument(ap, "--horizon", new)
    args = ap.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        ap.error(f"--out {args.out} is not empty; results are never overwritten")
    tb_dir = args.tb_dir or (TB_SHARED if TB_SHARED.is_dir() else TB_BUNDLED)
    if args.only in (None, "verl") and not tb_dir.is_dir():
        ap.error(f"--tb-dir {tb_dir}: no such folder (give the verl TensorBoard runs)")
    console_dir = args.console_dir or CONSOLE_SHARED
    if (args.console_dir is not None or args.only == "console") and not console_dir.is_dir():
        ap.error(f"--console-dir {console_dir}: no such folder (give verl console logs)")
    if args.forecast_steps is not None and args.forecast_steps < 1:
        ap.error(f"--forecast-steps {args.forecast_steps}: needs an integer >= 1")
    args.out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    if args.only in (None, "groups"):
        per_sample(args.out, lines, args.runs, args.model, args.forecast_steps, args.measured_cache)
    if args.only != "groups":
        # every verl log at hand was read by the first two plans
        seen = ", in-sample: read by the earlier plans" if args.runs in ("third", "seen") else ""
        logs = console_runs(console_dir) if console_dir.is_dir() else {}
        if logs:
            label = f"console logs in {console_dir.name}{seen}"
            verl(args.out, logs, label, lines, args.model, args.runs)
        elif args.only == "console":
            ap.error(f"--console-dir {console_dir}: no verl console log (*.log) there")
        else:
            print(f"note: no verl console log (*.log) in {console_dir}; that half is skipped")
        if args.only != "console":
            label = f"TensorBoard runs{seen}"
            verl(args.out, tb_runs(tb_dir), label, lines, args.model, args.runs)
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
