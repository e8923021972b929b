"""Fit the collapse model (:mod:`sim.models.staleness`) to a measured stability grid, predict
the held-out grid points, and check both scaling laws of PAPERS.md §2 on each side.

Grid: one row per run, columns ``S, lr, seed, collapsed, t_collapse, M_collapse,
regime, cos_sim_mean`` (what ``rolloutlab stability`` and ``rolloutlab real stability``
write to ``stability.csv``), ``T`` learner steps per run.

Fit. The model is invariant under ``theta -> c theta`` (``G_on, sigma_prompt, R_batch,
R_crit`` times ``c``, ``lag_sensitivity`` over ``c``), so ``G_on = 1`` fixes the unit and
``x = log(lag_sensitivity, R_batch, R_crit)`` is fitted; the noise scale comes from
the stable runs' successive-update cosine (:func:`noise_from_cosine`: collapse times
alone cannot tell a larger ``R_crit`` from more noise), and is fitted too only when the
grid has no cosine. Loss over the fit
points: ``mean |log(min(t_pred, T+1) / min(t_meas, T+1))|`` with a stable run counted as
collapsing at ``T + 1`` — one number that charges both a wrong class (up to ``log(T+1)``)
and a wrong horizon. Model runs use the grid row's seed (common random numbers).
Minimised by Nelder-Mead from a closed-form start: ``R_crit ~ median(t_collapse * eta)``
of late collapses (horizon: drift ``t eta G_on`` reaches ``R_crit``) and
``R_batch / kappa ~ max_S S eta_collapse(S)`` (stale boundary, :func:`sim.models.staleness.predict_eta_max`),
taking ``kappa ~ 5``; then two restarts from the best point so far.

Split: ``lr`` (alternate learning rates, sorted: even index fit, odd held out), ``S``
(one staleness held out: :func:`split_grid`) or ``seed`` (even seeds fit). Scaling checks per S from any grid (:func:`scaling_by_S`):
``S * eta_collapse`` (``eta_collapse`` = smallest lr at which at least half the seeds
collapse) and the median over collapsed runs of ``M_collapse * S * eta``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import polars as pl
from rolloutlab.sim.models.staleness import StalenessParams, simulate_batch
from scipy import optimize

GRID_COLUMNS = ("S", "lr", "seed", "collapsed", "t_collapse", "M_collapse")
FITTED = ("lag_sensitivity", "sigma_prompt", "R_batch", "R_crit")
SPLITS = ("lr", "seed", "S")


class GridError(ValueError):
    """A stability grid that cannot be fitted; the message names the file and the problem."""


DEFAULT_PARAMS = StalenessParams()  # frozen defaults shared by the fits below


def grid_steps(grid: str | Path, given: int | None = None) -> int:
    """Learner steps ``T`` per run of a stability grid: ``given`` if not None, else the
    grid's ``config.json`` (next to ``stability.csv``): ``steps`` (sim ``stability``),
    ``config.steps``, or ``grid.base.sync.steps`` (``real stability``).

    Raises :class:`GridError` naming the config file when it holds none of them, or the
    missing ``stability.csv`` of a folder without one.
    """
    p = Path(grid)
    if p.is_dir() and not (p / "stability.csv").exists():  # no grid: say so, not "--steps"
        raise GridError(f"{p / 'stability.csv'}: no stability grid (expected stability.csv)")
    if given is not None:
        return given
    cfg_path = (p if p.is_dir() else p.parent) / "config.json"
    if cfg_path.exists():
        raw = json.loads(cfg_path.read_text())
        T = (
            raw.get("steps")
            or raw.get("config", {}).get("steps")
            or raw.get("grid", {}).get("base", {}).get("sync", {}).get("steps")
        )
        if T:
            return int(T)
    raise GridError(f"{cfg_path}: no 'steps' (learner steps T per run); pass --steps")


def read_grid(path: str | Path) -> pl.DataFrame:
    """Read ``stability.csv`` (a file, or a directory holding one).

    Raises :class:`GridError` on a missing file, a missing column, fewer than two
    distinct ``(S, lr)`` points, or a collapsed run without ``t_collapse``.
    """
    p = Path(path)
    csv = p / "stability.csv" if p.is_dir() else p
    if not csv.exists():
        raise GridError(f"{csv}: no stability grid (expected stability.csv)")
    df = pl.read_csv(csv, infer_schema_length=None)
    if "status" in df.columns:  # a grid run through an executor: failed points have no outcome
        df = df.filter(pl.col("status") == "ok")
    missing = [c for c in GRID_COLUMNS if c not in df.columns]
    if missing:
        raise GridError(
            f"{csv}: missing column(s) {missing}; expected at least {list(GRID_COLUMNS)}"
        )
    df = df.with_columns(
        pl.col("collapsed")
        .cast(pl.Utf8)
        .str.to_lowercase()
        .is_in(["true", "1"])
        .alias("collapsed"),
        pl.col("S").cast(pl.Int64),
        pl.col("seed").cast(pl.Int64),
        pl.col("lr").cast(pl.Float64),
        pl.col("t_collapse").cast(pl.Int64),
        pl.col("M_collapse").cast(pl.Int64),
    )
    n_points = df.select("S", "lr").unique().height
    if n_points < 2:
        raise GridError(
            f"{csv}: {df.height} run(s) at {n_points} (S, lr) point; a fit and a held-out "
            "prediction need a grid of at least two points"
        )
    bad = df.filter(pl.col("collapsed") & pl.col("t_collapse").is_null())
    if bad.height:
        raise GridError(
            f"{csv}: run S={bad['S'][0]}, lr={bad['lr'][0]}, seed={bad['seed'][0]} collapsed "
            "without t_collapse"
        )
    return df


def split_grid(
    df: pl.DataFrame, by: str = "lr", held_out: float | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(fit, held_out)`` rows (module docstring). ``S``: one staleness held out, the
    ``held_out`` value or else the middle one of the sorted distinct values (index ``n // 2``:
    S = 4 of 1, 2, 4, 8), so the fit keeps two S or more; ``lr`` with ``held_out``: that lr
    alone held out. Raises GridError when a side would be empty, with fewer than three S
    for the S split, or a ``held_out`` value the grid does not hold."""
    if by not in SPLITS:
        raise GridError(f"split {by!r}: expected one of {SPLITS}")
    if held_out is not None and by == "seed":
        raise GridError(f"a held-out value ({held_out:g}) needs the lr or S split, not seed")
    values = sorted(df[by].unique().to_list())
    if len(values) < 2:
        raise GridError(
            f"split by {by}: the grid has a single {by} value ({values}); need two or more"
        )
    if by == "S" and len(values) < 3:
        raise GridError(
            f"split by S: the grid has S = {values}; holding one out needs three or more "
            "(the law needs two S to fit)"
        )
    if held_out is not None or by == "S":
        hold = held_out_value(df, by) if held_out is None else held_out
        if not any(abs(v - hold) <= 1e-12 * max(abs(v), 1.0) for v in values):
            raise GridError(f"split by {by}: held-out {hold:g} is not in the grid's {values}")
        mask = (pl.col(by).cast(pl.Float64) - hold).abs() > 1e-12 * max(abs(hold), 1.0)
        return df.filter(mask), df.filter(~mask)
    fit_values = values[0::2]
    mask = pl.col(by).is_in(fit_values)
    return df.filter(mask), df.filter(~mask)


def held_out_value(df: pl.DataFrame, by: str = "S") -> float:
    """The value the one-value split holds out by default: the middle of the sorted
    distinct ``by`` values (index ``n // 2``: S = 4 of 1, 2, 4, 8)."""
    values = sorted(df[by].unique().to_list())
    return values[len(values) // 2]


def predict(params: StalenessParams, df: pl.DataFrame, T: int) -> pl.DataFrame:
    """Model runs at the rows of ``df`` (same S, lr, seed): adds ``predicted_collapsed``,
    ``predicted_t_collapse``, ``predicted_M_collapse``."""
    res = simulate_batch(params, df["S"].to_numpy(), df["lr"].to_numpy(), T, df["seed"].to_numpy())
    return df.with_columns(
        pl.Series("predicted_collapsed", [r.collapsed for r in res]),
        pl.Series("predicted_t_collapse", [r.t_collapse for r in res], dtype=pl.Int64),
        pl.Series("predicted_M_collapse", [r.M_collapse for r in res], dtype=pl.Int64),
    )


def _horizon(t: np.ndarray, T: int) -> np.ndarray:
    return np.where(np.isnan(t), T + 1.0, np.minimum(t, T + 1.0))


def _params(x: np.ndarray, base: StalenessParams, names=FITTED) -> StalenessParams:
    return replace(base, G_on=1.0, **dict(zip(names, np.exp(x).tolist())))


def noise_from_cosine(df: pl.DataFrame, batch_prompts: int) -> float | None:
    """``sigma_prompt`` from the successive-update cosine of stable runs, or None.

    On policy, ``u_t = G_on e_0 + xi_t`` with ``E|xi|^2 = n^2`` gives
    ``E cos(u_t, u_{t-1}) ~ G_on^2 / (G_on^2 + n^2)``, so ``n = G_on sqrt(1/c - 1)`` and
    ``sigma_prompt = n sqrt(B)`` (``G_on = 1``). ``c`` = median ``cos_sim_mean`` of the
    stable runs at learning rates up to the grid's median (where the lag bias is small),
    clipped to [0.005, 0.99]. None without a ``cos_sim_mean`` column or such runs.
    """
    if "cos_sim_mean" not in df.columns:
        return None
    rows = df.filter(
        ~pl.col("collapsed")
        & (pl.col("lr") <= df["lr"].median())
        & pl.col("cos_sim_mean").cast(pl.Float64).is_finite()
    )
    if rows.height == 0:
        return None
    c = min(max(float(rows["cos_sim_mean"].cast(pl.Float64).median()), 0.005), 0.99)
    return math.sqrt(1.0 / c - 1.0) * math.sqrt(batch_prompts)


def initial_guess(df: pl.DataFrame, T: int, base: StalenessParams = DEFAULT_PARAMS) -> np.ndarray:
    """Closed-form start ``log(lag_sensitivity, sigma_prompt, R_batch, R_crit)`` (module docstring)."""
    late = df.filter(
        pl.col("collapsed") & (pl.col("t_collapse") > 2 * pl.col("S").clip(lower_bound=1))
    )
    coll = df.filter(pl.col("collapsed"))
    if late.height:
        r_crit = float((late["t_collapse"] * late["lr"]).median())
    elif coll.height:
        r_crit = float(T * coll["lr"].min())
    else:
        r_crit = float(T * df["lr"].max() * 2)
    scal = scaling_by_S(df)
    s_eta = scal["S_eta_collapse"].drop_nulls()
    c = float(s_eta.max()) if s_eta.len() else float(df["lr"].max() * df["S"].max())
    L = base.lag_sensitivity
    r_batch = 5.0 * c  # kappa ~ 5 at the default constants (sim.models.staleness.feedback_factor)
    return np.log([max(L, 1e-3), base.sigma_prompt, max(r_batch, 1e-6), max(r_crit, 1e-6)])


@dataclass(frozen=True)
class CollapseFit:
    """Fitted collapse-model constants."""

    params: StalenessParams
    """Fitted parameters (``G_on = 1``: the unit; ``dim``, ``batch_prompts`` as given)."""
    loss: float
    """Final loss: mean absolute log horizon error over the fit points."""
    fit_agreement: float
    """Share of fit points whose predicted class matches."""
    evaluations: int
    """Model-grid evaluations the optimiser used."""
    noise_from: str
    """``cosine`` (sigma_prompt set by :func:`noise_from_cosine`) or ``fit``."""


def fit_collapse(
    df: pl.DataFrame, T: int, base: StalenessParams = DEFAULT_PARAMS, max_evals: int = 300
) -> CollapseFit:
    """Fit ``lag_sensitivity, sigma_prompt, R_batch, R_crit`` to grid rows ``df`` (module docstring).

    Raises GridError on an empty grid or T < 1.
    """
    if df.height == 0 or T < 1:
        raise GridError(f"fit_collapse: need grid rows and T >= 1, got {df.height} rows, T={T}")
    S, lr, seeds = df["S"].to_numpy(), df["lr"].to_numpy(), df["seed"].to_numpy()
    sigma = noise_from_cosine(df, base.batch_prompts)
    names = FITTED if sigma is None else tuple(n for n in FITTED if n != "sigma_prompt")
    if sigma is not None:
        base = replace(base, sigma_prompt=sigma)
    meas = _horizon(df["t_collapse"].cast(pl.Float64).fill_null(float("nan")).to_numpy(), T)
    n_eval = 0

    def loss(x: np.ndarray) -> float:
        nonlocal n_eval
        n_eval += 1
        res = simulate_batch(_params(x, base, names), S, lr, T, seeds)
        pred = _horizon(np.array([r.t_collapse if r.collapsed else np.nan for r in res], float), T)
        return float(np.mean(np.abs(np.log(pred / meas))))

    x0 = initial_guess(df, T, base)[[FITTED.index(n) for n in names]]
    k = len(names)

    def nelder_mead(start: np.ndarray) -> optimize.OptimizeResult:
        return optimize.minimize(
            loss,
            start,
            method="Nelder-Mead",
            options={
                "maxfev": max_evals // 3,
                "xatol": 0.01,
                "fatol": 1e-4,
                "initial_simplex": start + 0.3 * np.vstack([np.zeros(k), np.eye(k)]),
            },
        )

    best = nelder_mead(x0)
    for _ in range(2):  # why restarts: Nelder-Mead on a piecewise-constant loss stalls on plateaus
        res = nelder_mead(best.x)
        if res.fun < best.fun:
            best = res
    params = _params(best.x, base, names)
    agree = float((predict(params, df, T)["predicted_collapsed"] == df["collapsed"]).mean())
    return CollapseFit(params, float(best.fun), agree, n_eval, "fit" if sigma is None else "cosine")


def scaling_by_S(
    df: pl.DataFrame, collapsed: str = "collapsed", M: str = "M_collapse"
) -> pl.DataFrame:
    """Per S: ``eta_collapse`` (smallest lr with at least half the seeds collapsed; null
    if none), ``S_eta_collapse = max(S, 1) * eta_collapse`` and ``M_S_eta`` = median
    over collapsed runs of ``M_collapse * max(S, 1) * lr`` (null if none)."""
    frac = df.group_by("S", "lr").agg(pl.col(collapsed).cast(pl.Float64).mean().alias("frac"))
    eta = (
        frac.filter(pl.col("frac") >= 0.5)
        .group_by("S")
        .agg(pl.col("lr").min().alias("eta_collapse"))
    )
    s_eff = pl.col("S").clip(lower_bound=1)
    m = (
        df.filter(pl.col(collapsed))
        .group_by("S")
        .agg((pl.col(M) * s_eff * pl.col("lr")).median().alias("M_S_eta"))
    )
    out = df.select("S").unique().join(eta, on="S", how="left").join(m, on="S", how="left")
    return (
        out.with_columns((pl.col("eta_collapse") * s_eff).alias("S_eta_collapse"))
        .sort("S")
        .select("S", "eta_collapse", "S_eta_collapse", "M_S_eta")
    )


def agreement(pred: pl.DataFrame) -> dict:
    """Held-out numbers of :func:`predict` output: ``points`` (runs), ``agreement``
    (share of runs whose class matches), ``both_collapsed`` (runs), ``t_collapse_mdape``
    (median ``|t_pred / t_meas - 1|`` over runs that collapsed on both sides; NaN if none)."""
    agree = float((pred["predicted_collapsed"] == pred["collapsed"]).mean())
    both = pred.filter(pl.col("collapsed") & pl.col("predicted_collapsed"))
    mdape = (
        float(((both["predicted_t_collapse"] / both["t_collapse"]) - 1).abs().median())
        if both.height
        else float("nan")
    )
    return {
        "points": pred.height,
        "agreement": agree,
        "both_collapsed": both.height,
        "t_collapse_mdape": mdape,
        "collapsed_measured": int(pred["collapsed"].sum()),
        "collapsed_predicted": int(pred["predicted_collapsed"].sum()),
    }


def scaling_table(
    real: pl.DataFrame, fitted: pl.DataFrame, sim: pl.DataFrame | None
) -> pl.DataFrame:
    """One row per S: the two scaling quantities from the real grid (``real_*``), from the
    fitted model run at every real grid point (``fitted_*``) and from the simulated grid
    (``sim_*``, when given). ``fitted`` is :func:`predict` output on the whole real grid."""
    parts = [
        ("real", scaling_by_S(real)),
        ("fitted", scaling_by_S(fitted, "predicted_collapsed", "predicted_M_collapse")),
    ]
    if sim is not None:
        parts.append(("sim", scaling_by_S(sim)))
    cols = ("eta_collapse", "S_eta_collapse", "M_S_eta")
    sides = [df.select("S", *[pl.col(c).alias(f"{side}_{c}") for c in cols]) for side, df in parts]
    out = sides[0]
    for df in sides[1:]:
        out = out.join(df, on="S", how="full", coalesce=True)
    return out.sort("S")
