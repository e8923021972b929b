"""Fit the collapse-horizon law (:mod:`sim.models.horizon`) per mechanism on half of one or
more measured stability grids, predict the other half (``compare horizon``).

Grids: ``stability.csv`` folders (``rolloutlab real stability`` or ``rolloutlab
stability``); each grid's mechanism is read from its ``config.json``
(``grid.base.sync.learner.clip`` / ``is_mode``; a grid without them ran the default
``clip on, IS token``): ``mechanism = "clip-on/is-token"`` etc. One law is fitted per
mechanism. All grids must share the step count ``T``.

Split: ``seed`` (even seeds fit, odd held out; or the seeds ``fit_seeds`` names fit, every
other seed held out), ``lr`` (alternate learning rates, sorted: even index fit) or ``S``
(one staleness held out, the middle of the grid's S values unless named). Held-out numbers per mechanism and pooled: classification
agreement (predicted ``P(collapse within T) > 1/2`` against measured), collapse-step
MdAPE ``median |t_pred / t_meas - 1|`` over runs collapsed on both sides (``t_pred`` the
law's median), and, with the seed split, the *seed floor* (:func:`seed_floor`): the same
numbers for a predictor that knows the held-out cell's fit seeds, i.e. what seed noise
alone leaves; and the classification *ceiling* (:func:`class_ceiling`), what no predictor
of the cell alone can beat.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from rolloutlab.analysis.collapse import baselines
from rolloutlab.analysis.collapse.compare import (
    GridError,
    agreement,
    grid_steps,
    held_out_value,
    read_grid,
    split_grid,
)
from rolloutlab.sim.models.horizon import (
    PAPER,
    HorizonFit,
    HorizonInputError,
    HorizonLaw,
    TwoPartLaw,
    fit_horizon,
    fit_horizon_groups,
    neg_log_likelihood,
)
from scipy import stats


def mechanism_of(grid: Path) -> str:
    """``clip-{on,off}/is-{off,token,sequence}`` from a grid's config.json (default when absent)."""
    cfg = (grid if grid.is_dir() else grid.parent) / "config.json"
    learner: dict = {}
    if cfg.exists():
        raw = json.loads(cfg.read_text())
        learner = raw.get("grid", {}).get("base", {}).get("sync", {}).get("learner", {})
    clip = "on" if learner.get("clip", True) else "off"
    return f"clip-{clip}/is-{learner.get('is_mode', 'token')}"


def detector_patience(grid: Path) -> int:
    """The collapse detector's KL patience of a grid (``grid.base.collapse.kl_patience`` in
    its config.json; 1 when absent: grids from before the option, and simulator grids)."""
    cfg = (grid if grid.is_dir() else grid.parent) / "config.json"
    raw = json.loads(cfg.read_text()) if cfg.exists() else {}
    return int(raw.get("grid", {}).get("base", {}).get("collapse", {}).get("kl_patience", 1))


def read_grids(paths: list[Path], steps: int | None = None) -> pl.DataFrame:
    """One table of every grid's ok runs with ``mechanism`` and ``T`` columns.

    Several grids may hold one mechanism (e.g. its S = 1, 4 runs and its S = 2, 8 runs).
    ``floor``: the detector's KL patience (:func:`detector_patience`). Raises
    :class:`GridError` naming the grid on an unreadable grid, when the grids mix step
    counts (a horizon is measured against its run length) or detector patience, or when a
    run (mechanism, S, lr, seed) is in two grids.
    """
    parts = []
    for p in paths:
        df = read_grid(p)
        T = grid_steps(p, steps)
        parts.append(
            df.select("S", "lr", "seed", "collapsed", "t_collapse").with_columns(
                pl.lit(mechanism_of(Path(p))).alias("mechanism"),
                pl.lit(T).alias("T"),
                pl.lit(detector_patience(Path(p))).alias("floor"),
            )
        )
    Ts = sorted({int(d["T"][0]) for d in parts})
    if len(Ts) > 1:
        raise GridError(
            f"{', '.join(str(p) for p in paths)}: runs of different step counts mixed "
            f"(T = {Ts}); compare grids of one T"
        )
    floors = sorted({int(d["floor"][0]) for d in parts})
    if len(floors) > 1:
        raise GridError(
            f"{', '.join(str(p) for p in paths)}: grids of different detector patience mixed "
            f"({floors}); a collapse step is measured by its detector, compare one at a time"
        )
    df = pl.concat(parts)
    keys = ["mechanism", "S", "lr", "seed"]
    twice = df.filter(df.select(keys).is_duplicated())
    if twice.height:  # why: grids of one mechanism may be split (S 1,4 then S 2,8), not overlap
        r = twice.row(0, named=True)
        raise GridError(
            f"{', '.join(str(p) for p in paths)}: run {r['mechanism']} S={r['S']} "
            f"lr={r['lr']:g} seed={r['seed']} is in two grids; give each run once"
        )
    return df


def _arrays(df: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    t = df["t_collapse"].cast(pl.Float64).fill_null(np.nan).to_numpy()
    t = np.where(df["collapsed"].to_numpy(), t, np.nan)
    return df["S"].to_numpy(), df["lr"].to_numpy(), t, df["T"].to_numpy()


def _floor(df: pl.DataFrame) -> float:
    """The runs' detector floor (:attr:`HorizonLaw.floor`; 1 without a ``floor`` column)."""
    return float(df["floor"][0]) if "floor" in df.columns else 1.0


def fit_mechanism(df: pl.DataFrame, n_boot: int = 100) -> HorizonFit:
    """:func:`sim.models.horizon.fit_horizon` on one mechanism's runs; raises GridError
    (naming the mechanism) where the law cannot be fitted."""
    try:
        return fit_horizon(*_arrays(df), n_boot=n_boot, floor=_floor(df))
    except HorizonInputError as exc:
        raise GridError(f"mechanism {df['mechanism'][0]}: {exc}") from None


LAWS = ("pooled", "separate", "drift", "two-part")
"""``compare horizon --law`` choices (:func:`fit_mechanisms`)."""


def fit_mechanisms(
    df: pl.DataFrame, n_boot: int = 100, law: str = "pooled", shared_lr: bool = False
) -> dict:
    """``{mechanism: HorizonFit}``. ``law`` (:data:`LAWS`): ``separate`` fits each mechanism
    alone (:func:`fit_mechanism`); ``pooled`` one :func:`sim.models.horizon.fit_horizon_groups`
    fit (shared horizon constants, a per-step constant ``C`` per mechanism); ``drift`` that
    plus a stale drift multiplier ``D`` per mechanism (the horizon rate at ``S >= 2``);
    ``two-part`` a :class:`sim.models.horizon.TwoPartLaw` per mechanism: ``pooled`` fitted
    to every run for whether a run collapses, ``pooled`` fitted to the collapsed runs alone
    for when (bootstrap replicates paired in order). Raises GridError naming the problem,
    ValueError on an unknown ``law``. ``shared_lr``: a mechanism may hold a single lr
    (:func:`sim.models.horizon.fit_horizon_groups`; ``pooled`` and ``drift`` only)."""
    if law not in LAWS:
        raise ValueError(f"law {law!r}: not one of {LAWS}")
    if law == "two-part":
        occurrence = fit_mechanisms(df, n_boot, "pooled")
        # a mechanism may have collapsed at one lr only: its C against the shared exponents
        step = fit_mechanisms(df.filter(pl.col("collapsed")), n_boot, "pooled", shared_lr=True)
        if set(step) != set(occurrence):
            missing = sorted(set(occurrence) - set(step))
            raise GridError(f"mechanisms {missing}: no collapsed run to fit a collapse step to")
        return {
            m: HorizonFit(
                TwoPartLaw(o.law, step[m].law),
                tuple(TwoPartLaw(a, b) for a, b in zip(o.boot, step[m].boot)),
                o.n_runs,
                o.n_collapsed,
                step[m].c_fixed,
            )
            for m, o in occurrence.items()
            if isinstance(o.law, HorizonLaw) and isinstance(step[m].law, HorizonLaw)
        }
    mechs = sorted(df["mechanism"].unique().to_list())
    if law == "separate" or (law == "pooled" and len(mechs) == 1):
        return {m: fit_mechanism(df.filter(pl.col("mechanism") == m), n_boot) for m in mechs}
    group = np.array([mechs.index(m) for m in df["mechanism"].to_list()])
    try:
        fits = fit_horizon_groups(
            *_arrays(df),
            group,
            n_boot=n_boot,
            drift=law == "drift",
            floor=_floor(df),
            shared_lr=shared_lr,
        )
    except HorizonInputError as exc:
        raise GridError(f"mechanisms {mechs}: {exc}") from None
    return dict(zip(mechs, fits))


def log_likelihood(fits: dict, df: pl.DataFrame) -> float:
    """Censored log-likelihood of ``df``'s runs under ``fits`` (``{mechanism: HorizonFit}``,
    :func:`sim.models.horizon.neg_log_likelihood` summed over mechanisms)."""
    laws = {m: fit.law for m, fit in fits.items()}
    if not all(isinstance(law, HorizonLaw) for law in laws.values()):
        raise ValueError("log_likelihood: a censored law per mechanism (not two-part)")
    return -sum(
        neg_log_likelihood(law, *_arrays(df.filter(pl.col("mechanism") == m)))
        for m, law in laws.items()
        if isinstance(law, HorizonLaw)
    )


def drift_test(df: pl.DataFrame, drift_fits: dict | None = None) -> dict:
    """Likelihood-ratio test of the ``drift`` law against the nested ``pooled`` one (``D = 1``
    for every mechanism), both fitted to all of ``df``'s runs: ``statistic`` ``2 (ll_drift -
    ll_pooled)``, ``dof`` (one ``D`` per mechanism), ``p_value`` (chi-square, Wilks;
    approximate with few runs), ``aic_drift - aic_pooled`` (< 0 favours the drift law) and
    the fitted ``D`` per mechanism. ``drift_fits``: the drift law already fitted to ``df``
    (None: fitted here). Raises GridError (:func:`fit_mechanisms`)."""
    pooled = fit_mechanisms(df, 0, "pooled")
    drift = fit_mechanisms(df, 0, "drift") if drift_fits is None else drift_fits
    ll_p, ll_d = log_likelihood(pooled, df), log_likelihood(drift, df)
    stat, dof = max(2.0 * (ll_d - ll_p), 0.0), len(drift)
    return {
        "ll_pooled": ll_p,
        "ll_drift": ll_d,
        "statistic": stat,
        "dof": dof,
        "p_value": float(stats.chi2.sf(stat, dof)),
        "aic_difference": 2.0 * dof - stat,
        "drift": {m: f.law.drift for m, f in drift.items()},
    }


def split(
    df: pl.DataFrame,
    by: str,
    fit_seeds: tuple[int, ...] | None = None,
    held_out: float | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(fit, held_out)`` (module docstring): without ``fit_seeds``
    :func:`analysis.collapse.compare.split_grid` (``held_out``: the lr or S value held
    out); with them (``by == "seed"`` only) the rows of those seeds fit and every other row
    is held out. Raises GridError with a single value, or when ``fit_seeds`` leaves either
    half of ``df`` empty."""
    if fit_seeds is None:
        return split_grid(df, by, held_out)
    values = sorted(df[by].unique().to_list())
    if by != "seed":
        raise GridError(f"fit seeds {list(fit_seeds)} need the seed split, not {by}")
    fit = sorted(set(values) & set(fit_seeds))
    if not fit or len(fit) == len(values):
        raise GridError(
            f"fit seeds {sorted(fit_seeds)} against the grid's seeds {values}: "
            "need at least one seed on each side"
        )
    mask = pl.col(by).is_in(fit)
    return df.filter(mask), df.filter(~mask)


def predict_rows(fit: HorizonFit, df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with ``p_collapse``, ``predicted_collapsed``, ``predicted_t`` (median) and its
    bootstrap interval ``predicted_t_lo`` / ``_hi``."""
    S, eta, _, T = _arrays(df)
    med, lo, hi = fit.predict(S, eta)
    p = fit.law.p_collapse(S, eta, T)
    return df.with_columns(
        pl.Series("p_collapse", p),
        pl.Series("predicted_collapsed", p > 0.5),
        pl.Series("predicted_t", med),
        pl.Series("predicted_t_lo", lo),
        pl.Series("predicted_t_hi", hi),
    )


def seed_floor(held: pl.DataFrame, fit_rows: pl.DataFrame) -> dict:
    """What seed noise alone leaves: each held-out run predicted by the fit seeds of its
    own cell. ``mdape``: median ``|t_seeds / t - 1|`` over held-out collapsed runs whose
    cell had a collapse in the fit half (``t_seeds`` the median of those collapse steps);
    ``agreement``: share of held-out runs whose class equals the fit seeds' majority
    (a tie counts as collapsed). NaN where undefined."""
    cells = fit_rows.group_by("mechanism", "S", "lr").agg(
        pl.col("t_collapse").filter(pl.col("collapsed")).median().alias("t_seeds"),
        (pl.col("collapsed").cast(pl.Float64).mean() >= 0.5).alias("class_seeds"),
    )
    j = held.join(cells, on=["mechanism", "S", "lr"], how="inner")
    c = j.filter(pl.col("collapsed") & pl.col("t_seeds").is_not_null())
    return {
        "mdape": float(((c["t_seeds"] / c["t_collapse"]) - 1).abs().median())
        if c.height
        else float("nan"),
        "agreement": float((j["class_seeds"] == j["collapsed"]).mean())
        if j.height
        else float("nan"),
    }


def class_ceiling(held: pl.DataFrame) -> float:
    """The best classification agreement *any* predictor of ``(mechanism, S, lr)`` alone can
    reach on ``held``: per cell, the larger of its collapsed and survived held-out counts,
    over all held-out runs (an upper bound, read off the held-out runs themselves, so never
    a prediction). NaN on no rows."""
    if not held.height:
        return float("nan")
    cells = held.group_by("mechanism", "S", "lr").agg(
        pl.col("collapsed").sum().alias("c"), pl.len().alias("n")
    )
    best = cells.select(pl.max_horizontal("c", pl.col("n") - pl.col("c")).sum()).item()
    return float(best / held.height)


def held_out_numbers(pred: pl.DataFrame) -> dict:
    """:func:`analysis.collapse.compare.agreement` of :func:`predict_rows` output (its
    median ``predicted_t`` as the predicted collapse step)."""
    return agreement(pred.rename({"predicted_t": "predicted_t_collapse"}))


def law_summary(fit: HorizonFit) -> dict:
    """The fitted constants with 16-84 % bootstrap intervals, and §2's exponents."""
    out: dict[str, Any] = {}
    for name in ("R", "a", "C", "c", "k", "sigma", "drift"):
        lo, hi = fit.interval(name)
        out[name] = {"value": float(getattr(fit.law, name)), "lo": lo, "hi": hi}
    if fit.c_fixed:  # one stale S: c not fitted
        out["c"] = {"value": PAPER["c"], "lo": float("nan"), "hi": float("nan"), "fixed": True}
    if isinstance(fit.law, TwoPartLaw):  # the step constants above; whether, from these
        out["occurrence"] = {n: float(getattr(fit.law.occurrence, n)) for n in ("a", "c", "sigma")}
    out["paper"] = PAPER
    out["runs"], out["collapsed"], out["bootstrap"] = fit.n_runs, fit.n_collapsed, len(fit.boot)
    return out


def horizon_study(
    df: pl.DataFrame,
    by: str = "seed",
    n_boot: int = 100,
    law: str = "pooled",
    fit_seeds: tuple[int, ...] | None = None,
    held_out: float | None = None,
) -> tuple[dict, pl.DataFrame]:
    """Per mechanism: fit on one half, predict the other; and a fit on all runs (the
    exponents with their seed intervals), :func:`fit_mechanisms` (``law``); with the
    ``drift`` law also :func:`drift_test` (``summary["drift_test"]``). Beside the law,
    the naive rules and the run-to-run floor on the same held-out runs
    (:mod:`analysis.collapse.baselines`: ``summary["scores"]`` the law's, ``summary
    ["baselines"]`` theirs; the held-out rows carry each rule's ``p_<rule>`` and
    ``t_<rule>`` and ``cell``: ``seen`` on the seed split, ``unseen`` on the lr and S
    splits). ``held_out``: the lr or S value held out (:func:`split`). Returns ``(summary,
    held-out rows)``. Raises GridError (one S, one lr, no collapse, a single split value,
    ``fit_seeds`` leaving a mechanism's fit or held-out half empty: :func:`split`)."""
    summary: dict = {"split": by, "law": law, "mechanisms": {}}
    if fit_seeds is not None:
        summary["fit_seeds"] = sorted(fit_seeds)
    if by == "S" and held_out is None:  # one S for every mechanism, read off the whole grid
        held_out = held_out_value(df, "S")
    if held_out is not None:
        summary["held_out_value"] = held_out
    halves = {m: split(p, by, fit_seeds, held_out) for (m,), p in df.group_by("mechanism")}
    fit_all = pl.concat([h[0] for h in halves.values()])
    half_fits = fit_mechanisms(fit_all, n_boot, law)
    all_fits = fit_mechanisms(df, n_boot, law)
    if law == "drift":
        summary["drift_test"] = drift_test(df, all_fits)
    axis = None if by == "seed" else by
    T = int(df["T"][0])
    preds = []
    for mech in sorted(halves):
        fit_rows, held = halves[mech]
        pred = predict_rows(half_fits[mech], held)
        preds.append(pred)
        summary["mechanisms"][mech] = {
            "held_out": held_out_numbers(pred),
            "scores": law_scores(pred, T),
            "baselines": baselines.baseline_scores(fit_rows, held, T, axis),
            "seed_floor": seed_floor(held, fit_rows) if by == "seed" else None,
            "law_half": law_summary(half_fits[mech]),
            "law_all": law_summary(all_fits[mech]),
        }
    held_all = with_baselines(pl.concat(preds), fit_all, T, axis)
    summary["held_out"] = held_out_numbers(held_all)
    summary["scores"] = law_scores(held_all, T)
    summary["baselines"] = baselines.baseline_scores(fit_all, held_all, T, axis)
    distinct = distinct_runs(held_all)
    summary["held_out_distinct"] = held_out_numbers(distinct)
    summary["class_ceiling"] = class_ceiling(held_all)
    summary["class_ceiling_distinct"] = class_ceiling(distinct)
    if by == "seed":
        summary["seed_floor"] = seed_floor(held_all, fit_all)
        summary["seed_floor_distinct"] = seed_floor(distinct, fit_all)
    return summary, held_all


def law_scores(pred: pl.DataFrame, T: int) -> dict:
    """:func:`analysis.collapse.baselines.score` of the law's :func:`predict_rows` output
    (its ``p_collapse`` and median ``predicted_t``)."""
    return baselines.score(
        pred, pred["p_collapse"], pred["predicted_collapsed"], pred["predicted_t"], T
    )


def with_baselines(
    held: pl.DataFrame, fit_rows: pl.DataFrame, T: int, axis: str | None
) -> pl.DataFrame:
    """``held`` with ``cell`` (``seen`` / ``unseen``) and each naive rule's probability
    ``p_<rule>`` and step ``t_<rule>`` (:func:`analysis.collapse.baselines.predict`)."""
    cols = [pl.lit("seen" if axis is None else "unseen").alias("cell")]
    for rule, f in baselines.predict(fit_rows, held, T, axis).items():
        cols += [f["p"].alias(f"p_{rule}"), f["predicted_t"].alias(f"t_{rule}")]
    return held.with_columns(cols)


def distinct_runs(rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` with each synchronous run (``S <= 1``) counted once across mechanisms: rows
    of equal ``S, lr, seed`` and outcome (``collapsed``, ``t_collapse``) are one run there
    (**modelling choice**, docs/staleness.md: at ``S <= 1`` with one minibatch per step the
    ratio is 1, so every clip / IS setting takes the same step, and a mechanism grid's
    ``S = 1`` runs may be one grid's copied in). Stale rows are kept as they are."""
    keys = ["S", "lr", "seed", "collapsed", "t_collapse"]
    sync = rows.filter(pl.col("S") <= 1).unique(keys, keep="first", maintain_order=True)
    return pl.concat([sync, rows.filter(pl.col("S") > 1)])


def grid_horizon(
    df: pl.DataFrame, T: int, n_boot: int = 30
) -> tuple[HorizonFit | None, pl.DataFrame | None, str]:
    """The horizon law fitted to one grid (``rolloutlab stability``'s rows: ``S, lr, seed,
    collapsed, t_collapse``) and a per-(S, lr) table: ``runs``, ``collapsed_share``,
    ``t_measured`` (median over collapsed runs), ``t_predicted`` with ``t_lo`` / ``t_hi``
    (16-84 % seed bootstrap) and ``p_collapse``. ``(None, None, why)`` where no law can be
    fitted (one S, one lr, no collapse)."""
    runs = df.with_columns(pl.lit(T).alias("T"))
    try:
        fit = fit_horizon(*_arrays(runs), n_boot=n_boot)
    except HorizonInputError as exc:
        return None, None, f"no horizon law: {exc}"
    cells = (
        runs.group_by("S", "lr")
        .agg(
            pl.len().alias("runs"),
            pl.col("collapsed").cast(pl.Float64).mean().alias("collapsed_share"),
            pl.col("t_collapse").filter(pl.col("collapsed")).median().alias("t_measured"),
        )
        .sort("S", "lr")
    )
    S, eta = cells["S"].to_numpy(), cells["lr"].to_numpy()
    med, lo, hi = fit.predict(S, eta)
    table = cells.with_columns(
        pl.Series("t_predicted", med),
        pl.Series("t_lo", lo),
        pl.Series("t_hi", hi),
        pl.Series("p_collapse", fit.law.p_collapse(S, eta, T)),
    )
    a, c = fit.law.a, fit.law.c
    return fit, table, f"horizon law: t ~ eta^-{a:.2f} (horizon), stale boundary (S-1)^{c:.2f} eta"


def horizon_compare(
    grids: list[Path],
    df: pl.DataFrame,
    out_dir: Path,
    by: str = "seed",
    n_boot: int = 100,
    law: str = "pooled",
    fit_seeds: tuple[int, ...] | None = None,
    held_out: float | None = None,
) -> dict:
    """``compare horizon``'s study: :func:`horizon_study` of ``df`` (:func:`read_grids` of
    ``grids``), written to ``out_dir``: horizon_points.csv (the held-out rows),
    horizon_summary.json and config.json (the summary, with ``real`` the grids and
    ``steps`` T), horizon.png (each mechanism's law fitted on all runs) and, where the
    grids keep their run folders, mechanism_metrics.csv
    (:func:`analysis.collapse.mechanism_metrics.mechanism_metrics`). Returns the summary.
    Raises GridError as :func:`horizon_study`, before anything is written."""
    from rolloutlab.analysis.collapse.horizon_plot import horizon_figure  # matplotlib
    from rolloutlab.analysis.collapse.mechanism_metrics import mechanism_metrics
    from rolloutlab.sim.scenario.provenance import write_config
    from rolloutlab.sim.trace import strict_json

    summary, held = horizon_study(df, by, n_boot, law, fit_seeds, held_out)
    laws = {m: f.law for m, f in fit_mechanisms(df, 0, law).items()}
    paths: dict[str, list[Path]] = {}
    for g in grids:
        paths.setdefault(mechanism_of(g), []).append(Path(g))
    signals = mechanism_metrics(df, paths)
    summary = {"real": [str(g) for g in grids], "steps": int(df["T"][0]), **summary}
    held.write_csv(out_dir / "horizon_points.csv")
    strict_json.write_json(out_dir / "horizon_summary.json", summary)
    title = (
        "fit on seeds " + ",".join(map(str, sorted(fit_seeds)))
        if fit_seeds is not None
        else f"{by} = {summary['held_out_value']:g} held out"
        if "held_out_value" in summary
        else f"fit on half the {by}s"
    )
    horizon_figure(held, laws, df, out_dir / "horizon.png", title)
    write_config(out_dir / "config.json", {"kind": "compare-horizon", **summary})
    if signals is not None:
        signals.write_csv(out_dir / "mechanism_metrics.csv")
    return summary
