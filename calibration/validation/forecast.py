"""The forecast's check on steps it never saw: fit a run's first ``K`` steps, forecast the
later steps' straggler probability ``P(max/median > tau)`` per ``G`` and the step's
makespan, and put three naive rules and the run-to-run floor beside it (the plans:
``docs/per_sample.md``, "Forecasting later steps" and "A local level forecast").

Forecast models (:data:`MODELS`):

* ``local-level`` — the local level model (:mod:`calibration.fits.local_level`) of the
  fit steps' measured per-step values (each ``(G, tau)`` cell's P, the makespan, a verl
  metric), one signal-to-noise ratio per run fitted on the cells whose fit-step mean P
  lies in :data:`INFORMATIVE`; its level is the forecast of every later step. Its
  length distribution is the fit steps' measured groups, each step weighted by the
  filter (a mixture of whole groups, so the within-prompt correlation is kept);
* ``drift`` — the drifting length model (:mod:`calibration.fits.drift_fit`), drawn;
* ``backtest`` — the level rules (local level, persistence, static fit), each scored by
  a rolling-origin backtest inside the fit window and combined with weights inverse to
  their squared backtest errors (:mod:`calibration.fits.rolling_origin`;
  :func:`backtest_forecast`). The linear trend is left out: a level rule forecasts the
  same value at every horizon, so its error at the fit window's horizons (``K/10`` to
  ``K/2`` steps) speaks for the later steps, while a trend's error grows with the
  horizon, which no backtest inside the window can show.

Naive rules, from the fit steps' own measured values only:

* ``persistence`` — the mean over the last :data:`PERSIST_STEPS` fit steps, carried forward;
* ``linear`` — an OLS line in the step over the model's window, extrapolated (P clipped
  to ``[0, 1]``);
* ``static`` — the drift model with every slope zero, fitted on all ``K`` steps.

The makespan of a step is its longest response at the logged ``B`` and ``G`` (tokens): a
log holds no clock, and a synchronous step decodes until its longest response ends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import polars as pl
from rolloutlab.calibration.fits.drift_fit import (
    StepSummary,
    fit_drift,
    summarise_aggregates,
    summarise_groups,
)
from rolloutlab.calibration.fits.lengths_fit import StepLengthStats, fit_step
from rolloutlab.calibration.fits.local_level import fit_local_level
from rolloutlab.calibration.fits.rolling_origin import backtest_errors, combine, origins, weights
from rolloutlab.calibration.readers.grouped import GroupedTrace
from rolloutlab.calibration.validation.measure import padded, step_ratio, subsample
from rolloutlab.calibration.validation.run_spread import ERROR_TARGET

PERSIST_STEPS = 10
"""Fit steps averaged by the persistence rule."""

INFORMATIVE = (0.05, 0.95)
"""A (G, tau) cell is scored only where the measured held-out P lies in this range."""

RULES = ("forecast", "persistence", "linear", "static")
"""Predictors compared, the model first."""

MODELS = ("local-level", "drift", "backtest")
"""Forecast models (module docstring), the default first."""

CANDIDATES = ("local-level", "persistence", "static")
"""What the ``backtest`` model combines (module docstring)."""

BACKTEST_POWER = 2.0
"""The ``backtest`` model's weights are ``error**-BACKTEST_POWER``: inverse squared
error, chosen on the runs the earlier plans saw (docs/per_sample.md, "A backtest
combination"; in-sample there)."""


@dataclass(frozen=True)
class ForecastConfig:
    """One forecast check."""

    fit_steps: int
    """``K``: the first ``K`` logged steps are fitted, the rest forecast."""
    taus: tuple[float, ...]
    """Straggler thresholds (> 1)."""
    window: int | None = None
    """Fit steps the drifting lines use (the last ones); None: ``K // 2``."""
    draws: int = 200
    """Subsamples per measured step and G."""
    reps: int = 200
    """Simulated steps per forecast step."""
    seed: int = 0
    """Seed of subsamples and draws."""
    cap: int | None = None
    """Response cap (tokens) when the log states none (lengths at it are censored)."""
    horizon: int | None = None
    """Forecast only the first ``horizon`` steps after ``K`` (None: every later step)."""
    model: str = MODELS[0]
    """The forecast model, one of :data:`MODELS`."""

    def span(self) -> int:
        """The window in steps (at least 2)."""
        return max(self.window or self.fit_steps // 2, 2)


def per_step_p(
    mats: list[np.ndarray], B: int, G_max: int, taus, draws: int, seed: int
) -> np.ndarray:
    """``(T, G_max, n_tau)`` measured ``P(max/median > tau)`` of each step, ``B`` groups of
    ``G`` samples subsampled without replacement ``draws`` times (:func:`measure.subsample`)."""
    out = np.zeros((len(mats), G_max, len(taus)))
    for g in range(1, G_max + 1):
        rng = np.random.default_rng([seed, B, g])
        for i, m in enumerate(mats):
            r = step_ratio(subsample(rng, m, B, g, draws))
            out[i, g - 1] = [(r > t).mean() for t in taus]
    return out


def model_p(model, steps, B: int, G_max: int, G_log: int, taus, reps: int, seed: int):
    """``((T, G_max, n_tau) P(straggler), (T,) median step max)`` of ``reps`` simulated
    steps of ``B`` prompts per step (common random numbers across G: the first ``G``
    columns of one ``G_log`` draw)."""
    rng = np.random.default_rng(seed)
    p = np.zeros((len(steps), G_max, len(taus)))
    span = np.zeros(len(steps))
    for i, s in enumerate(steps):
        x = model.sample(rng, B * reps, G_log, s).reshape(reps, B, G_log)  # (reps, B, G)
        for g in range(G_max):
            r = step_ratio(x[:, :, : g + 1])
            p[i, g] = [(r > t).mean() for t in taus]
        span[i] = np.median(x.reshape(reps, -1).max(axis=1))
    return p, span


def naive(series: np.ndarray, fit_t: np.ndarray, new_t: np.ndarray, window: int, clip=None):
    """``{"persistence", "linear"}`` forecasts at ``new_t`` of a per-step ``series``
    (``(K, ...)`` over ``fit_t``): the mean of the last :data:`PERSIST_STEPS` values, and
    an OLS line over the last ``window`` values (``clip``: (lo, hi) bounds or None)."""
    persist = np.broadcast_to(
        series[-PERSIST_STEPS:].mean(axis=0), (len(new_t),) + series.shape[1:]
    )
    t, y = fit_t[-window:].astype(float), series[-window:].reshape(min(window, len(series)), -1)
    slope, icpt = np.polyfit(t, y, 1)
    lin = (icpt[None] + slope[None] * new_t[:, None].astype(float)).reshape(
        (len(new_t),) + series.shape[1:]
    )
    if clip is not None:
        lin = np.clip(lin, *clip)
    return {"persistence": np.array(persist), "linear": lin}


def local_level_forecast(
    p_fit: np.ndarray, span_fit: np.ndarray, n_new: int
) -> tuple[np.ndarray, np.ndarray]:
    """The ``local-level`` forecast (module docstring) of ``n_new`` later steps from the
    fit steps' measured ``(K, G, n_tau)`` P and ``(K,)`` makespan: ``((n_new, G, n_tau)
    P in [0, 1], (n_new,) makespan)``. The P cells share one signal-to-noise ratio, fitted
    on the cells whose fit-step mean lies in :data:`INFORMATIVE`; the makespan has its own."""
    mean = p_fit.mean(axis=0)
    live = (mean >= INFORMATIVE[0]) & (mean <= INFORMATIVE[1])
    p = np.clip(fit_local_level(p_fit, live).level, 0.0, 1.0)
    span = float(fit_local_level(span_fit).level)
    return np.broadcast_to(p, (n_new, *p.shape)).copy(), np.full(n_new, span)


def rule_forecasts(
    series: np.ndarray, n_new: int, static: np.ndarray, probability: bool
) -> dict[str, np.ndarray]:
    """Each of :data:`CANDIDATES`' forecast ``(n_new, ...)`` of the steps after a per-step
    ``series`` (``(k, ...)``), the same at every later step: the local level (with
    ``probability``, ``q`` fitted on the series whose mean lies in :data:`INFORMATIVE`
    and the level clipped to ``[0, 1]``, as :func:`local_level_forecast`), persistence
    (the mean of the last :data:`PERSIST_STEPS` steps, as :func:`naive`) and ``static``
    (the static fit's value, ``series.shape[1:]``, made by the caller)."""
    if probability:
        mean = series.mean(axis=0)
        live = (mean >= INFORMATIVE[0]) & (mean <= INFORMATIVE[1])
        level = np.clip(fit_local_level(series, live).level, 0.0, 1.0)
    else:
        level = fit_local_level(series).level
    values = {
        "local-level": level,
        "persistence": series[-PERSIST_STEPS:].mean(axis=0),
        "static": np.asarray(static, dtype=np.float64),
    }
    shape = (n_new,) + series.shape[1:]
    return {c: np.broadcast_to(values[c], shape).copy() for c in CANDIDATES}


@dataclass(frozen=True)
class Backtest:
    """The ``backtest`` model's forecast of one series and how it was made."""

    forecast: np.ndarray
    """``(n_new, ...)`` the combined forecast."""
    errors: dict[str, float]
    """Candidate -> mean absolute error over the rolling origins (the fit window only)."""
    weights: dict[str, float]
    """Candidate -> its weight in :attr:`forecast` (sums to 1)."""


def backtest_forecast(
    series: np.ndarray,
    n_new: int,
    static_at: Callable[[int], np.ndarray],
    probability: bool,
    power: float = BACKTEST_POWER,
) -> Backtest:
    """The ``backtest`` model (module docstring) of a per-step ``series`` (``(K, ...)``,
    the fit steps) for the ``n_new`` later steps: at each origin ``k`` of
    :func:`rolling_origin.origins` every candidate (:func:`rule_forecasts` of
    ``series[:k]``, its static value ``static_at(k)`` fitted on the first ``k`` steps
    only) forecasts the mean of steps ``k..K-1``, scored over the series whose block mean
    lies in :data:`INFORMATIVE` (``probability``) or over all; the candidates' forecasts
    from all ``K`` steps (``static_at(K)``) are then combined with weights
    ``error**-power`` (:func:`rolling_origin.weights`; equal weights when no origin
    leaves 2 fit steps, or none scores a series)."""
    K = len(series)

    def at(k: int) -> dict[str, np.ndarray]:
        return {
            c: v[0] for c, v in rule_forecasts(series[:k], 1, static_at(k), probability).items()
        }

    def informative(m: np.ndarray) -> np.ndarray:
        return (m >= INFORMATIVE[0]) & (m <= INFORMATIVE[1])

    found = backtest_errors(series, at, origins(K), informative if probability else None)
    errors = {c: found.get(c, float("nan")) for c in CANDIDATES}  # no origin: all NaN
    w = weights(errors, power)
    full = rule_forecasts(series, n_new, static_at(K), probability)
    return Backtest(combine(full, w), errors, w)


def head(summary: StepSummary, k: int) -> StepSummary:
    """The first ``k`` steps of ``summary``."""
    rho = None if summary.rho is None else summary.rho[:k]
    return replace(
        summary,
        steps=summary.steps[:k],
        log_q=summary.log_q[:k],
        censored=summary.censored[:k],
        rho=rho,
    )


def measured(trace: GroupedTrace, cfg: ForecastConfig) -> np.ndarray:
    """``(T, G_logged, n_tau)`` :func:`per_step_p` of every step of ``trace`` at its
    logged ``B`` (the fewest groups of a step) and ``G = 1..G_logged``."""
    groups = trace.groups("length")
    B = min(len(g) for g in groups)
    mats = [padded(g) for g in groups]
    return per_step_p(mats, B, trace.typical_group_size(), cfg.taus, cfg.draws, cfg.seed)


def forecast_groups(
    trace: GroupedTrace,
    cfg: ForecastConfig,
    others: Sequence[tuple[GroupedTrace, np.ndarray]] = (),
    meas: np.ndarray | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Forecast check of one per-sample run (module docstring).

    Returns ``(cells, makespan)``: ``cells`` one row per (G, tau) — ``G, B, tau,
    p_meas, p_meas_se`` (over held-out steps), ``p_forecast, p_persistence, p_linear,
    p_static`` (held-out means), ``floor`` (``|p_meas - mean of the other runs' p|`` on
    the same steps; null without ``others``), ``scored`` (p_meas in :data:`INFORMATIVE`);
    ``makespan`` one row per held-out step — ``step, makespan_meas`` and each rule's
    forecast (tokens). ``others``: other runs of the configuration with their
    :func:`measured` arrays (the floor); ``meas``: this run's :func:`measured`, if known.
    Raises ValueError when ``fit_steps`` leaves fewer than 2 fit or
    1 held-out step.
    """
    steps = trace.steps()
    K = cfg.fit_steps
    if not 2 <= K < len(steps):
        raise ValueError(f"--fit-steps {K}: needs 2 <= K < {len(steps)} logged steps")
    groups = trace.groups("length")
    mats = [padded(g) for g in groups]
    B = min(len(g) for g in groups)
    G_log = trace.typical_group_size()
    cap = trace.known_cap() or cfg.cap
    summary = summarise_groups(
        steps[:K], groups[:K], cap or int(trace.samples["length"].max()), censor=cap is not None
    )
    window = cfg.span()
    drift = fit_drift(summary, window)
    end = len(steps) if cfg.horizon is None else min(K + cfg.horizon, len(steps))
    held = np.asarray(steps[K:end])
    fit_t = np.asarray(steps[:K])
    if meas is None:
        meas = measured(trace, cfg)  # (T, G, tau)
    span_meas = np.array([np.nanmax(m[:B]) for m in mats])
    pred, span = {}, {}
    drawn = [("static", drift.static(summary))]
    if cfg.model == "drift":
        drawn.insert(0, ("forecast", drift))
    elif cfg.model == "local-level":
        pred["forecast"], span["forecast"] = local_level_forecast(
            meas[:K], span_meas[:K], len(held)
        )
    for name, model in drawn:
        pred[name], span[name] = model_p(
            model.lengths_model(list(held)), held, B, G_log, G_log, cfg.taus, cfg.reps, cfg.seed + 1
        )
    for name, v in naive(meas[:K], fit_t, held, window, (0.0, 1.0)).items():
        pred[name] = v
    for name, v in naive(span_meas[:K], fit_t, held, window).items():
        span[name] = v
    extra: dict[str, dict[str, float]] = {"cells": {}, "makespan": {}}
    if cfg.model == "backtest":
        bt_p, bt_span = _backtest_groups(
            meas[:K], span_meas[:K], summary, fit_t, held, B, G_log, cfg, pred, span
        )
        pred["forecast"], span["forecast"] = bt_p.forecast, bt_span.forecast
        for key, bt in (("cells", bt_p), ("makespan", bt_span)):
            extra[key] = {
                f"{col}_{c.replace('-', '_')}": float(getattr(bt, attr)[c])
                for c in CANDIDATES
                for col, attr in (("weight", "weights"), ("backtest_error", "errors"))
            }
    p_meas = meas[K:end].mean(axis=0)  # (G, tau)
    floor = None
    if others:
        other_p = [m[[o.steps().index(s) for s in held]].mean(axis=0) for o, m in others]
        floor = np.abs(p_meas - np.mean(other_p, axis=0))
    rows = []
    se = meas[K:end].std(axis=0, ddof=1) / np.sqrt(len(held)) if len(held) > 1 else 0 * p_meas
    for g in range(G_log):
        for j, tau in enumerate(cfg.taus):
            row = {"G": g + 1, "B": B, "tau": tau, "p_meas": p_meas[g, j], "p_meas_se": se[g, j]}
            row |= {f"p_{r}": float(pred[r][:, g, j].mean()) for r in RULES}
            row["floor"] = None if floor is None else float(floor[g, j])
            row["scored"] = bool(INFORMATIVE[0] <= p_meas[g, j] <= INFORMATIVE[1])
            rows.append(row | extra["cells"])
    cells = pl.DataFrame(rows, schema_overrides={"floor": pl.Float64})
    makespan = pl.DataFrame(
        {"step": held, "makespan_meas": span_meas[K:end]}
        | {f"makespan_{r}": np.asarray(span[r], dtype=np.float64) for r in RULES}
        | {k: np.full(len(held), v) for k, v in extra["makespan"].items()}
    )
    return cells, makespan


def _backtest_groups(p_fit, span_fit, summary, fit_t, held, B, G_log, cfg, pred, span):
    """``(P, makespan)`` :class:`Backtest` of :func:`forecast_groups` (model ``backtest``):
    the static fit at an inner origin ``k`` is the zero-slope drift model of the first
    ``k`` steps drawn for ``5 * reps`` steps (its distribution is the same at every step);
    at ``K`` it is the held-out static forecast already drawn (``pred``, ``span``)."""
    K = len(p_fit)
    cache: dict[int, tuple[np.ndarray, float]] = {
        K: (pred["static"].mean(axis=0), float(np.mean(span["static"])))
    }

    def static(k: int) -> tuple[np.ndarray, float]:
        if k not in cache:
            model = fit_drift(head(summary, k), None, slope=False)
            s = int(fit_t[k - 1])
            p, sp = model_p(
                model.lengths_model([s]), [s], B, G_log, G_log, cfg.taus, 5 * cfg.reps, cfg.seed + 2
            )
            cache[k] = (p[0], float(sp[0]))
        return cache[k]

    bt_p = backtest_forecast(p_fit, len(held), lambda k: static(k)[0], probability=True)
    bt_span = backtest_forecast(
        span_fit, len(held), lambda k: np.asarray(static(k)[1]), probability=False
    )
    return bt_p, bt_span


def forecast_runs(
    trace: GroupedTrace, others: list[GroupedTrace], cfg: ForecastConfig
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`forecast_groups` of ``trace`` with ``others`` (runs of the same
    configuration, each measured once on the held-out steps) as the floor. Raises
    ValueError when another run lacks a held-out step or logs another G."""
    held = trace.steps()[cfg.fit_steps :][: cfg.horizon]
    for o in others:
        missing = sorted(set(held) - set(o.steps()))
        if missing:
            raise ValueError(f"another run lacks held-out step {missing[0]} (the floor needs it)")
        if o.typical_group_size() != trace.typical_group_size():
            raise ValueError(
                f"another run logs G = {o.typical_group_size()}, this run "
                f"{trace.typical_group_size()} (the floor needs one configuration)"
            )
    return forecast_groups(trace, cfg, [(o, measured(o, cfg)) for o in others])


def cell_errors(cells: pl.DataFrame) -> dict[str, float]:
    """Mean absolute error of each rule (and the floor) over the scored cells (NaN when
    none is scored)."""
    s = cells.filter(pl.col("scored"))
    out = {
        r: float((s[f"p_{r}"] - s["p_meas"]).abs().mean()) if s.height else float("nan")
        for r in RULES
    }
    if s.height and s["floor"].null_count() == 0:
        out["floor"] = float(s["floor"].mean())
    return out


def meets_target(cells: pl.DataFrame) -> tuple[int, int]:
    """``(cells meeting, cells scored)`` of ``|error| <= max(0.10, floor + 2 SE)``
    (ERRATA's decided target; floor 0 without other runs)."""
    s = cells.filter(pl.col("scored"))
    floor = s["floor"].fill_null(0.0)
    target = np.maximum(ERROR_TARGET, floor.to_numpy() + 2 * s["p_meas_se"].to_numpy())
    err = (s["p_forecast"] - s["p_meas"]).abs().to_numpy()
    return int((err <= target).sum()), s.height


def makespan_errors(makespan: pl.DataFrame) -> dict[str, float]:
    """Mean absolute error of each rule's makespan forecast over held-out steps (tokens)."""
    return {
        r: float((makespan[f"makespan_{r}"] - makespan["makespan_meas"]).abs().mean())
        for r in RULES
    }


AGGREGATE_TAGS = ("response_length/mean", "response_length/max")
"""verl metrics the aggregates forecast predicts (and all the ``local-level`` model reads)."""

DRIFT_TAGS = (
    "response_length/min",
    "response_length/clip_ratio",
    "prompt_length/mean",
    "perf/total_num_tokens",
)
"""verl metrics the ``drift`` model's per-step censored lognormal needs besides those."""


def forecast_aggregates(
    table: pl.DataFrame,
    fit_steps: int,
    cap: int,
    window: int | None = None,
    model: str = MODELS[0],
):
    """Forecast verl's ``response_length/mean`` and ``/max`` after step ``fit_steps`` from
    the steps up to it (module docstring; ``table``: a verl step table with ``step`` and
    :data:`AGGREGATE_TAGS`, and for ``model`` ``drift`` :data:`DRIFT_TAGS`; rows with a
    null among them left out). ``local-level``: each metric's own local level model.
    ``drift``: the per-step censored lognormal (its ``n`` per step, the responses, is
    ``total_num_tokens / (response mean + prompt mean)``) on drifting lines.

    Returns one row per held-out step: ``step``, ``mean_meas``, ``max_meas`` and
    ``{mean,max}_{rule}`` for each of :data:`RULES`. Raises ValueError with fewer than 2
    fit steps, no held-out step, or a metric missing."""
    if model not in MODELS:
        raise ValueError(f"forecast model {model!r}: one of {', '.join(MODELS)}")
    tags = list(AGGREGATE_TAGS) + (list(DRIFT_TAGS) if model == "drift" else [])
    missing = [tag for tag in tags if tag not in table.columns]
    if missing:
        raise ValueError(f"no {', '.join(missing)} in the run's metrics (model {model})")
    t = table.drop_nulls(subset=tags).sort("step")
    fit, held = t.filter(pl.col("step") <= fit_steps), t.filter(pl.col("step") > fit_steps)
    if fit.height < 2 or held.height == 0:
        raise ValueError(
            f"fit steps {fit.height}, held-out steps {held.height}: need >= 2 and >= 1"
        )
    fit_t, new_t = fit["step"].to_numpy(), held["step"].to_numpy()
    span = max(window or fit_steps // 2, 2)
    out = {"step": new_t}
    for metric in ("mean", "max"):
        out[f"{metric}_meas"] = held[f"response_length/{metric}"].to_numpy()
    if model == "drift":
        out["mean_forecast"], out["max_forecast"] = _drift_aggregates(t, fit, new_t, cap, span)
    for metric in ("mean", "max"):
        series = fit[f"response_length/{metric}"].to_numpy().astype(np.float64)
        if model == "local-level":
            out[f"{metric}_forecast"] = np.full(len(new_t), float(fit_local_level(series).level))
        elif model == "backtest":
            out[f"{metric}_forecast"] = backtest_forecast(
                series, len(new_t), partial(_mean_of_first, series), False
            ).forecast
        for name, v in naive(series, fit_t, new_t, span).items():
            out[f"{metric}_{name}"] = v
        out[f"{metric}_static"] = np.full(len(new_t), series.mean())
    return pl.DataFrame(
        {
            k: out[k]
            for k in ["step", *[f"{m}_{r}" for m in ("mean", "max") for r in ("meas", *RULES)]]
        }
    )


def _mean_of_first(series: np.ndarray, k: int) -> np.ndarray:
    """The static fit of a verl metric on its first ``k`` fit steps: their mean."""
    return np.asarray(series[:k].mean())


def _drift_aggregates(t: pl.DataFrame, fit: pl.DataFrame, new_t: np.ndarray, cap: int, span: int):
    """``(mean, max)`` forecasts of the ``drift`` model (:func:`forecast_aggregates`)."""
    n_all = np.rint(
        t["perf/total_num_tokens"] / (t["response_length/mean"] + t["prompt_length/mean"])
    )
    n = int(np.median(n_all.to_numpy()))
    fits = [
        fit_step(
            StepLengthStats(
                int(r["step"]),
                r["response_length/mean"],
                r["response_length/max"],
                r["response_length/min"],
                r["response_length/clip_ratio"],
                n,
                cap,
            )
        )
        for r in fit.iter_rows(named=True)
    ]
    fit_t = fit["step"].to_numpy()
    summary = summarise_aggregates(list(fit_t), [f.mu for f in fits], [f.sigma for f in fits], cap)
    return fit_drift(summary, span).aggregates(new_t, n)
