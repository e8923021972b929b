"""Scores of ``bench/frameworks_three_loops.py``: one loop's held-out predictions beside
the naive rules, and the run-to-run floor over seeds.

Per run (one loop, controller and seed), steps ``0..K-1`` fit and steps ``K..`` are held
out; every prediction below uses only the fit steps and what is known when a step starts
(its G, its prompts):

- **straggler rate** (``S_t = 1[max/median response length > tau]``, docs/metrics.md):
  the simulator's is the mean over the held-out steps of ``compare idle``'s
  ``drawn_straggler_prob`` (the share of its length draws, at the step's G and prompts,
  with an event); the naive rule ("persistence") is the fit steps' measured rate. Errors:
  ``|predicted - measured|`` of the held-out rate, and the Brier score
  ``mean_t (p_t - S_t)^2`` over the held-out steps (Brier 1950, Monthly Weather Review
  78(1)), where persistence predicts ``p_t`` = the fit steps' rate at every step.
  ``linear``: the ordinary least-squares line through the fit steps' indicators
  ``(t, S_t)``, ``t < K``, extrapolated to each held-out step and clipped to ``[0, 1]``
  (:func:`linear_trend`); its rate is the mean of those ``p_t``.
- **generation makespan** (first request to last rollout finished, s): ``compare idle``'s
  ``drawn`` (whole simulator: drawn lengths through the fitted engine), ``replay``
  (measured lengths: schedule and cost only, known after the step, so not a forecast),
  ``constant`` (median of the fit steps of the same G, all fit steps when that G was not
  seen), ``persistence`` (the step before) and ``linear`` (the least-squares line of
  measured makespan against step over the fit steps of the same G when it has at least 2,
  else over all fit steps, extrapolated to the held-out step, not clipped:
  :func:`linear_trend`). Error: MdAPE ``median_t |pred_t / meas_t - 1|`` over the
  held-out steps.
- **step time** (``t_end - t_start`` of the steps table, s): the simulator's is the drawn
  makespan, plus the learner priced as the simulator prices it
  (:meth:`sim.models.cost.LinearCost.learner_step_s`: ``const + per_token * tokens``,
  :func:`calibration.fits.cost_fit.fit_learner` on the fit steps' ``train_time``) at the
  step's expected tokens (its prompt tokens plus its rollouts times the fit steps' mean
  response length), plus the fit steps' median of what neither covers
  (``step time - makespan - train_time``: request set-up, rewards, logging); ``constant``,
  ``persistence`` and ``linear`` as for the makespan, on the measured step times. Error:
  MdAPE.

Floor over seeds (same loop and controller): the rate's mean ``|r_i - r_j|`` over pairs of
seeds (a lookup of another seed's run), and for times the median over ordered pairs of
the MdAPE of seed ``j``'s held-out steps as the prediction of seed ``i``'s, step by step.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import polars as pl
from rolloutlab.calibration.fits.cost_fit import fit_learner

RATE_RULES = ("sim", "persistence", "linear")
MAKESPAN_RULES = ("drawn", "replay", "constant", "persistence", "linear")
STEP_RULES = ("sim", "constant", "persistence", "linear")
NAIVE = ("constant", "persistence", "linear")
"""The naive rules a time forecast is judged against (``replay`` is not a forecast)."""
RATE_NAIVE = ("persistence", "linear")
"""The naive rules a straggler-rate forecast is judged against."""


def mdape(pred, meas) -> float:
    """``median |pred / meas - 1|`` over the entries where both are known (nan if none)."""
    p, m = np.asarray(pred, float), np.asarray(meas, float)
    ok = np.isfinite(p) & np.isfinite(m) & (m > 0)
    return float(np.median(np.abs(p[ok] / m[ok] - 1.0))) if ok.any() else float("nan")


def linear_trend(step, value, k: int, group_size=None) -> np.ndarray:
    """Least-squares line of ``value`` against ``step`` over the fit steps (the first
    ``k`` entries), evaluated at each held-out step (entries ``k..``).

    ``step``, ``value``: shape ``(n,)``, ordered by step. With ``group_size`` (shape
    ``(n,)``) a held-out step's line is fitted on the fit steps of its G when there are at
    least 2 of them, else on all fit steps. Returns shape ``(n - k,)``, not clipped.
    Raises ValueError when ``k < 2`` or no held-out step exists. Ordinary least squares
    (``numpy.polyfit``, degree 1).
    """
    t, v = np.asarray(step, float), np.asarray(value, float)
    if not 2 <= k < t.size:
        raise ValueError(f"linear_trend: fit steps {k} with {t.size} steps; need 2 <= K < steps")
    G = np.zeros(t.size) if group_size is None else np.asarray(group_size)
    out = np.empty(t.size - k)
    for i in range(k, t.size):
        same = G[:k] == G[i]
        use = same if same.sum() >= 2 else np.ones(k, bool)
        slope, intercept = np.polyfit(t[:k][use], v[:k][use], 1)
        out[i - k] = intercept + slope * t[i]
    return out


def step_times(
    per_step: pl.DataFrame, steps: pl.DataFrame, rollouts: pl.DataFrame, k: int
) -> pl.DataFrame:
    """Step-time predictions of every step (module docstring).

    ``per_step``: ``compare idle``'s ``idle_comparison.csv`` (``step``, ``group_size``,
    ``measured_makespan_s``, ``predicted_makespan_s``); ``steps``: the trace's steps table
    (``step, t_start, t_end, train_time, sync_time``); ``rollouts``: its rollouts table
    (``step, prompt_tokens, response_tokens``). Returns ``step, group_size,
    measured_step_s, sim_step_s, constant_step_s, persistence_step_s``, sorted by step.
    Raises ValueError when fewer than 2 fit steps or no held-out step exist.
    """
    per = per_step.sort("step")
    if not 2 <= k < per.height:
        raise ValueError(f"step_times: fit steps {k} with {per.height} steps; need 2 <= K < steps")
    tok = rollouts.group_by("step").agg(
        pl.col("prompt_tokens").sum().alias("prompt_sum"),
        pl.len().alias("n_rollouts"),
        pl.col("response_tokens").sum().alias("response_sum"),
    )
    df = (
        per.join(steps.select("step", "t_start", "t_end", "train_time", "sync_time"), on="step")
        .join(tok, on="step")
        .sort("step")
    )  # a join keeps no row order
    if df.height != per.height:
        raise ValueError("step_times: a step of idle_comparison.csv is missing from the trace")
    step_s = (df["t_end"] - df["t_start"]).to_numpy()
    fit = df.head(k)
    tokens_fit = (fit["prompt_sum"] + fit["response_sum"]).to_numpy().astype(float)
    learner = fit_learner(tokens_fit, fit["train_time"].to_numpy(), fit["sync_time"].to_numpy())
    mean_response = float(fit["response_sum"].sum() / fit["n_rollouts"].sum())
    tokens = df["prompt_sum"].to_numpy() + df["n_rollouts"].to_numpy() * mean_response
    rest = float(
        np.median(step_s[:k] - fit["measured_makespan_s"].to_numpy() - fit["train_time"].to_numpy())
    )
    sim = (
        df["predicted_makespan_s"].to_numpy()
        + learner.learner_const_s
        + learner.learner_s_per_token * tokens
        + rest
    )
    G = df["group_size"].to_numpy()
    constant = np.array(
        [float(np.median(step_s[:k][G[:k] == g] if (G[:k] == g).any() else step_s[:k])) for g in G]
    )
    persistence = np.concatenate([[np.nan], step_s[:-1]])
    return pl.DataFrame(
        {
            "step": df["step"],
            "group_size": df["group_size"],
            "measured_step_s": step_s,
            "sim_step_s": sim,
            "constant_step_s": constant,
            "persistence_step_s": persistence,
        }
    )


def score_run(per_step: pl.DataFrame, times: pl.DataFrame, k: int) -> dict:
    """One run's held-out errors (module docstring) from ``compare idle``'s per-step table
    and :func:`step_times`' table; also G per step, the measured rates and mean times."""
    per = per_step.sort("step")
    fit, held = per.head(k), per.slice(k)
    t_held = times.sort("step").slice(k)
    s_fit = fit["measured_straggler"].cast(pl.Float64).to_numpy()
    s_held = held["measured_straggler"].cast(pl.Float64).to_numpy()
    p_sim = held["drawn_straggler_prob"].to_numpy()
    fit_rate, held_rate = float(s_fit.mean()), float(s_held.mean())
    steps = per["step"].to_numpy()
    p_t = {
        "sim": p_sim,
        "persistence": np.full(held.height, fit_rate),
        "linear": np.clip(linear_trend(steps, np.concatenate([s_fit, s_held]), k), 0.0, 1.0),
    }
    rate_pred = {r: float(p.mean()) for r, p in p_t.items()}
    brier = {r: float(np.mean((p - s_held) ** 2)) for r, p in p_t.items()}
    G = per["group_size"].to_numpy()
    meas_mk = held["measured_makespan_s"].to_numpy()
    mk_pred = {
        r: held[f"{'predicted' if r == 'drawn' else r}_makespan_s"].to_numpy()
        for r in MAKESPAN_RULES
        if r != "linear"
    }
    mk_pred["linear"] = linear_trend(steps, per["measured_makespan_s"].to_numpy(), k, G)
    makespan = {r: mdape(mk_pred[r], meas_mk) for r in MAKESPAN_RULES}
    t_all = times.sort("step")
    meas_step = t_held["measured_step_s"].to_numpy()
    st_pred = {r: t_held[f"{r}_step_s"].to_numpy() for r in STEP_RULES if r != "linear"}
    st_pred["linear"] = linear_trend(
        t_all["step"].to_numpy(), t_all["measured_step_s"].to_numpy(), k, G
    )
    step = {r: mdape(st_pred[r], meas_step) for r in STEP_RULES}
    return {
        "G": [int(g) for g in per["group_size"]],
        "fit_rate": fit_rate,
        "held_out_rate": held_rate,
        "held_out_steps": held.height,
        "rate_pred": rate_pred,
        "rate_abs_error": {r: abs(v - held_rate) for r, v in rate_pred.items()},
        "brier": brier,
        "makespan_mdape": makespan,
        "step_mdape": step,
        "held_out_makespan_s": [float(v) for v in meas_mk],
        "held_out_step_s": [float(v) for v in meas_step],
        "held_out_straggler": [int(v) for v in s_held],
        "mean_makespan_s": float(meas_mk.mean()),
        "mean_step_s": float(meas_step.mean()),
    }


def floor(runs: Sequence[dict]) -> dict:
    """Run-to-run floor over the seeds ``runs`` (:func:`score_run` results of one loop and
    controller; module docstring): ``rate`` (mean pairwise |difference| of held-out
    rates), ``makespan`` and ``step`` (median over ordered pairs of the MdAPE of one seed's
    held-out steps against another's). nan with fewer than 2 seeds."""
    if len(runs) < 2:
        return {"rate": float("nan"), "makespan": float("nan"), "step": float("nan")}
    pairs = list(itertools.combinations(range(len(runs)), 2))
    rate = float(
        np.mean([abs(runs[i]["held_out_rate"] - runs[j]["held_out_rate"]) for i, j in pairs])
    )
    ordered = list(itertools.permutations(range(len(runs)), 2))

    def times(key: str) -> float:
        vals = []
        for i, j in ordered:
            a, b = runs[i][key], runs[j][key]
            n = min(len(a), len(b))
            vals.append(mdape(b[:n], a[:n]))
        return float(np.median(vals))

    return {
        "rate": rate,
        "makespan": times("held_out_makespan_s"),
        "step": times("held_out_step_s"),
    }


def spread(values: Sequence[float]) -> str:
    """``mean (min-max)`` of ``values`` to two decimals (``mean`` alone for one value)."""
    v = np.asarray(values, float)
    if v.size == 1:
        return f"{v[0]:.2f}"
    return f"{v.mean():.2f} ({v.min():.2f}-{v.max():.2f})"


def beats(runs: Sequence[dict], metric: str, model: str, rules: Sequence[str]) -> str:
    """``"n of S"``: the seeds where ``model``'s ``metric`` error is below every rule's."""
    n = sum(
        all(r[metric][model] < r[metric][rule] for rule in rules if np.isfinite(r[metric][rule]))
        for r in runs
    )
    return f"{n} of {len(runs)}"


def summary_rows(results: dict[str, dict[str, list[dict]]]) -> list[dict]:
    """One row per (controller, loop) of ``results[controller][loop]`` (a list of
    :func:`score_run` results over seeds): each error as ``mean (min-max)`` over the seeds,
    the floor, and the seeds where the simulator beats every naive rule."""
    rows = []
    for ctl, loops in results.items():
        for loop, runs in loops.items():
            if not runs:
                continue
            fl = floor(runs)
            rows.append(
                {
                    "controller": ctl,
                    "loop": loop,
                    "seeds": len(runs),
                    "G held out": spread([np.mean(r["G"][-r["held_out_steps"] :]) for r in runs]),
                    "rate fit / held out": f"{spread([r['fit_rate'] for r in runs])} / "
                    f"{spread([r['held_out_rate'] for r in runs])}",
                    "rate error sim": spread([r["rate_abs_error"]["sim"] for r in runs]),
                    "rate error persistence": spread(
                        [r["rate_abs_error"]["persistence"] for r in runs]
                    ),
                    "rate error linear": spread([r["rate_abs_error"]["linear"] for r in runs]),
                    "rate floor": f"{fl['rate']:.2f}",
                    "sim beats naive (rate)": beats(runs, "rate_abs_error", "sim", RATE_NAIVE),
                    "Brier sim / persistence / linear": " / ".join(
                        spread([r["brier"][k] for r in runs]) for k in RATE_RULES
                    ),
                    "sim beats naive (Brier)": beats(runs, "brier", "sim", RATE_NAIVE),
                    "makespan MdAPE drawn": spread([r["makespan_mdape"]["drawn"] for r in runs]),
                    "replay": spread([r["makespan_mdape"]["replay"] for r in runs]),
                    "constant": spread([r["makespan_mdape"]["constant"] for r in runs]),
                    "persistence": spread([r["makespan_mdape"]["persistence"] for r in runs]),
                    "linear": spread([r["makespan_mdape"]["linear"] for r in runs]),
                    "makespan floor": f"{fl['makespan']:.2f}",
                    "drawn beats naive": beats(runs, "makespan_mdape", "drawn", NAIVE),
                    "step MdAPE sim": spread([r["step_mdape"]["sim"] for r in runs]),
                    "step constant": spread([r["step_mdape"]["constant"] for r in runs]),
                    "step persistence": spread([r["step_mdape"]["persistence"] for r in runs]),
                    "step linear": spread([r["step_mdape"]["linear"] for r in runs]),
                    "step floor": f"{fl['step']:.2f}",
                    "sim beats naive (step)": beats(runs, "step_mdape", "sim", NAIVE),
                    "mean step s": spread([r["mean_step_s"] for r in runs]),
                    "mean makespan s": spread([r["mean_makespan_s"] for r in runs]),
                }
            )
    return rows


def markdown(rows: list[dict], columns: Sequence[str]) -> str:
    """A markdown table of ``columns`` of ``rows``."""
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    return head + "".join("| " + " | ".join(str(r[c]) for c in columns) + " |\n" for r in rows)
