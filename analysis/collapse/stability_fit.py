"""Boundaries and scaling slopes measured from a real stability grid (PAPERS.md §2 laws),
and the output folder of ``rolloutlab real stability`` (:func:`write_real_grid`).

- ``eta_max(S)``: between the largest lr at which fewer than half the seeds collapsed
  and the next lr up, where at least half did (the bracket ``[eta_lo, eta_hi]``); the
  point estimate is their geometric mean. Censored (NaN) when no lr, or every lr, collapses.
- Slope of ``log eta_max`` against ``log S`` (paper: -1 in the stale-rollout regime, 0
  in the horizon regime) and of ``log t_collapse`` against ``log eta`` over collapsed runs
  (paper: -1, i.e. ``T eta`` ~ constant). Each fit: ``scipy.stats.linregress`` slope and
  its standard error, and a seed bootstrap (seeds resampled within every cell) giving
  the 16th-84th percentile band of the slope.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from rolloutlab.analysis.collapse.stability_plots import plot_phase_diagram
from rolloutlab.sim.scenario.provenance import write_config
from rolloutlab.sim.trace import strict_json
from scipy import stats


def eta_max_table(df: pl.DataFrame) -> pl.DataFrame:
    """Per S: ``eta_lo``, ``eta_hi``, ``eta_max`` (geometric mean; NaN when censored) and
    ``frac_by_lr`` (collapsed fraction at each lr, ascending lr)."""
    rows = []
    for (S,), g in df.group_by(["S"], maintain_order=True):
        frac = g.group_by("lr").agg(pl.col("collapsed").mean().alias("f")).sort("lr")
        lrs, f = frac["lr"].to_numpy(), frac["f"].to_numpy()
        up = np.flatnonzero(f >= 0.5)
        hi_i = int(up[0]) if up.size else None
        lo = float(lrs[hi_i - 1]) if hi_i else math.nan
        hi = float(lrs[hi_i]) if hi_i is not None else math.nan
        rows.append(
            {
                "S": int(S),
                "eta_lo": lo,
                "eta_hi": hi,
                "eta_max": math.sqrt(lo * hi) if hi_i else math.nan,
                "frac_by_lr": " ".join(f"{x:.2f}" for x in f),
            }
        )
    return pl.DataFrame(rows).sort("S")


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 2 or np.ptp(x[ok]) == 0:
        return math.nan, math.nan
    r = stats.linregress(np.log(x[ok]), np.log(y[ok]))
    return float(r.slope), float(r.stderr) if ok.sum() > 2 else math.nan


def _eta_slope(df: pl.DataFrame) -> float:
    t = eta_max_table(df)
    return _fit(t["S"].to_numpy().astype(float), t["eta_max"].to_numpy())[0]


def _tc_slope(df: pl.DataFrame) -> float:
    c = df.filter(pl.col("collapsed"))
    return _fit(c["lr"].to_numpy(), c["t_collapse"].to_numpy().astype(float))[0]


def _bootstrap(df: pl.DataFrame, stat, reps: int, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    cells = [g for _, g in df.group_by(["S", "lr"], maintain_order=True)]
    vals = np.array(
        [
            stat(pl.concat([g[rng.integers(0, g.height, g.height)] for g in cells]))
            for _ in range(reps)
        ],
        float,
    )
    vals = vals[np.isfinite(vals)]
    return (
        (float(np.percentile(vals, 16)), float(np.percentile(vals, 84)))
        if vals.size
        else (math.nan, math.nan)
    )


def fit_laws(df: pl.DataFrame, reps: int = 200, seed: int = 0) -> dict:
    """Slopes of a grid: ``eta_max_vs_S`` and ``t_collapse_vs_eta``, each ``{slope, stderr,
    boot_16, boot_84, n}`` (``n``: points fitted), plus ``S_eta_max`` (``S * eta_max`` per S)."""
    t = eta_max_table(df)
    c = df.filter(pl.col("collapsed"))
    out: dict[str, Any] = {}
    for name, x, y, stat in (
        ("eta_max_vs_S", t["S"].to_numpy().astype(float), t["eta_max"].to_numpy(), _eta_slope),
        (
            "t_collapse_vs_eta",
            c["lr"].to_numpy(),
            c["t_collapse"].to_numpy().astype(float),
            _tc_slope,
        ),
    ):
        slope, err = _fit(x, y)
        lo, hi = _bootstrap(df, stat, reps, seed)
        out[name] = {
            "slope": slope,
            "stderr": err,
            "boot_16": lo,
            "boot_84": hi,
            "n": int((np.isfinite(x) & np.isfinite(y)).sum()),
        }
    out["S_eta_max"] = {int(s): float(s * e) for s, e in zip(t["S"], t["eta_max"])}
    return out


def t_collapse_table(df: pl.DataFrame) -> pl.DataFrame:
    """Per (lr, S): collapsed runs, mean and std of ``t_collapse`` and mean ``lr * t_collapse``."""
    return (
        df.filter(pl.col("collapsed"))
        .group_by("lr", "S")
        .agg(
            pl.len().alias("collapsed_runs"),
            pl.col("t_collapse").mean().alias("t_collapse_mean"),
            pl.col("t_collapse").std().alias("t_collapse_std"),
            (pl.col("t_collapse") * pl.col("lr")).mean().alias("eta_t_collapse"),
        )
        .sort("lr", "S")
    )


def write_real_grid(
    df: pl.DataFrame, T: int, config: dict, out_dir: Path, title: str
) -> tuple[pl.DataFrame, dict]:
    """Write ``out_dir``/stability.csv (``df``, one row per run), phase_diagram.png
    (``title``; the measured ``eta_max`` dashed), fit.json (:func:`fit_laws`) and
    config.json (``config`` with library versions). ``T``: learner steps per run.

    Returns ``(eta_max_table(df), fit_laws(df))``.
    """
    df.write_csv(out_dir / "stability.csv")
    table = eta_max_table(df)
    fits = fit_laws(df)
    plot_phase_diagram(
        df,
        None,
        T,
        out_dir / "phase_diagram.png",
        title=title,
        eta_max=dict(zip(table["S"].to_list(), table["eta_max"].to_list())),
    )
    strict_json.write_json(out_dir / "fit.json", fits)
    write_config(out_dir / "config.json", config)
    return table, fits


def finish_real_grid(
    df: pl.DataFrame, grid: dict[str, Any], runtime_s: float, executor: dict, out_dir: Path
) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """Write the outputs of a finished real stability grid: :func:`write_real_grid` on its
    finished runs, then ``stability.csv`` with every point of ``df`` (failed ones with their
    status and error). ``grid``: the grid's settings
    (:class:`real.runners.stability.GridConfig` as a dict); ``executor``: how its points ran.

    Returns ``(eta_max_table, t_collapse_table, fit_laws)`` of the finished runs.
    """
    ok = df.filter(pl.col("status") == "ok")
    steps, first = grid["base"]["sync"]["steps"], grid["seed_offset"]
    table, fits = write_real_grid(
        ok,
        steps,
        {"grid": grid, "runtime_s": runtime_s, **executor},
        out_dir,
        f"Real asynchronous GRPO ({grid['mode']}:S), T = {steps} steps, seeds "
        f"{first}..{first + grid['seeds'] - 1}",
    )
    df.write_csv(out_dir / "stability.csv")
    return table, t_collapse_table(ok), fits
