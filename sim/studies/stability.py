"""Stability grids over (S, lr, seed) and boundary measurement by bisection, for the
collapse model of :mod:`sim.models.staleness` (PAPERS.md §2); the phase diagram is drawn by
:mod:`analysis.collapse.stability_plots`.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from rolloutlab.sim.models.staleness import StalenessParams, predict_eta_max, simulate_batch
from rolloutlab.sim.trace.progress import progress_bar

OUTCOME_SCHEMA = {
    "S": pl.Int64,
    "lr": pl.Float64,
    "seed": pl.Int64,
    "collapsed": pl.Boolean,
    "t_collapse": pl.Int64,
    "M_collapse": pl.Int64,
    "regime": pl.Utf8,
    "cos_sim_mean": pl.Float64,
    "failure": pl.Utf8,
}
"""The columns (and polars types) a simulated and a real stability grid share
(:mod:`real.runners.stability`): the run (S, lr, seed) and its collapse outcome, same meanings
(:mod:`sim.models.staleness`)."""
OUTCOME_COLUMNS = list(OUTCOME_SCHEMA)

CSV_COLUMNS = [*OUTCOME_COLUMNS, "drift_final", "eta_max_pred"]


def default_lrs(n: int = 21) -> np.ndarray:
    """Log-spaced learning rates 1e-3 .. 0.3 (n points): with the default constants this
    spans stable, horizon-limited and stale-limited runs for S in 1..32."""
    return np.geomspace(1e-3, 0.3, n)


def run_grid(
    params: StalenessParams, S_values, lrs, T: int, seeds: int, progress: bool = False
) -> pl.DataFrame:
    """Simulate every (S, lr, seed) with seed in range(seeds); one row per run.

    Columns: :data:`CSV_COLUMNS` (t_collapse, M_collapse null when stable). Runs are
    vectorised per S value (a progress bar over S when ``progress``).
    """
    lrs = np.asarray(lrs, float)
    rows = []
    for S in progress_bar(list(S_values), desc="stability", unit="S", enabled=progress):
        lr_g, seed_g = np.meshgrid(lrs, np.arange(seeds), indexing="ij")  # (n_lr, seeds)
        results = simulate_batch(params, S, lr_g.ravel(), T, seed_g.ravel())
        pred = float(predict_eta_max(params, S, T))
        for lr, seed, r in zip(lr_g.ravel(), seed_g.ravel(), results):
            rows.append(
                (
                    int(S),
                    float(lr),
                    int(seed),
                    r.collapsed,
                    r.t_collapse,
                    r.M_collapse,
                    r.regime,
                    r.cos_sim_mean,
                    r.failure,
                    r.drift_final,
                    pred,
                )
            )
    schema = {
        **OUTCOME_SCHEMA,
        "drift_final": pl.Float64,
        "eta_max_pred": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


def run_point(point: dict, params: StalenessParams, lrs, T: int, seeds: int) -> pl.DataFrame:
    """One point of a grid run through an executor: every (lr, seed) at ``point["S"]``,
    vectorised as :func:`run_grid` does it (same rows, same values)."""
    return run_grid(params, [point["S"]], lrs, T, seeds)


def summarize(df: pl.DataFrame) -> pl.DataFrame:
    """Per S: smallest lr with at least half the seeds collapsed (``eta_collapse``), the
    predicted eta_max, the main failure mode there, and cosine means of stable and
    collapsed runs."""
    frac = df.group_by("S", "lr").agg(pl.col("collapsed").mean().alias("frac"))
    first = (
        frac.filter(pl.col("frac") >= 0.5)
        .group_by("S")
        .agg(pl.col("lr").min().alias("eta_collapse"))
    )
    mode = (
        df.filter(pl.col("collapsed"))
        .join(first, on="S")
        .filter(pl.col("lr") == pl.col("eta_collapse"))
        .group_by("S")
        .agg(pl.col("failure").mode().first().alias("failure_at_boundary"))
    )
    cos = df.group_by("S").agg(
        pl.col("eta_max_pred").first(),
        pl.col("cos_sim_mean").filter(~pl.col("collapsed")).mean().alias("cos_stable"),
        pl.col("cos_sim_mean")
        .filter(pl.col("collapsed") & pl.col("cos_sim_mean").is_not_nan())
        .mean()
        .alias("cos_collapsed"),
    )
    return (
        cos.join(first, on="S", how="left")
        .join(mode, on="S", how="left")
        .sort("S")
        .select(
            "S",
            "eta_max_pred",
            "eta_collapse",
            "failure_at_boundary",
            "cos_stable",
            "cos_collapsed",
        )
    )


def measure_eta_max(
    params: StalenessParams,
    S_values,
    T: int,
    seeds: int,
    lo: float = 1e-4,
    hi: float = 1.0,
    iters: int = 18,
) -> np.ndarray:
    """Boundary eta_max(S) by geometric bisection: the lr at which half the seeds collapse.

    Returns shape (len(S_values),). All S and seeds of one bisection step run as one
    vectorised batch. Assumes collapse at ``hi`` and none at ``lo`` (ValueError if not).
    """
    S = np.asarray(list(S_values))
    lo_v, hi_v = np.full(S.size, float(lo)), np.full(S.size, float(hi))
    seed_ids = np.arange(seeds)

    def frac(lrs: np.ndarray) -> np.ndarray:  # (n_S,) collapsed fraction at lrs
        rs = simulate_batch(
            params, np.repeat(S, seeds), np.repeat(lrs, seeds), T, np.tile(seed_ids, S.size)
        )
        return np.array([r.collapsed for r in rs], float).reshape(S.size, seeds).mean(1)

    if np.any(frac(hi_v) < 0.5) or np.any(frac(lo_v) >= 0.5):
        raise ValueError(
            f"measure_eta_max: [lo, hi] = [{lo}, {hi}] does not bracket the boundary for S = {S.tolist()}"
        )
    for _ in range(iters):
        mid = np.sqrt(lo_v * hi_v)
        up = frac(mid) >= 0.5
        hi_v = np.where(up, mid, hi_v)
        lo_v = np.where(up, lo_v, mid)
    return np.sqrt(lo_v * hi_v)
