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
- **generation makespan** (first request to last rollout finished, s): ``compare idle``'s
  ``drawn`` (whole simulator: drawn lengths through the fitted engine), ``replay``
  (measured lengths: schedule and cost only, known after the step, so not a forecast),
  ``constant`` (median of the fit steps of the same G, all fit steps when that G was not
  seen) and ``persistence`` (the step before). Error: MdAPE
  ``median_t |pred_t / meas_t - 1|`` over the held-out steps.
- **step time** (``t_end - t_start`` of the steps table, s): the simulator's is the drawn
  makespan, plus the learner priced as the simulator prices it
  (:meth:`sim.models.cost.LinearCost.learner_step_s`: ``const + per_token * tokens``,
  :func:`calibration.fits.cost_fit.fit_learner` on the fit steps' ``train_time``) at the
  step's expected tokens (its prompt tokens plus its rollouts times the fit steps' mean
  response length), plus the fit steps' median of what neither covers
  (``step time - makespan - train_time``: request set-up, rewards, logging); ``constant``
  and ``persistence`` as for the makespan. Error: MdAPE.

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

RATE_RULES = ("sim", "persistence")
MAKESPAN_RULES = ("drawn", "replay", "constant", "persistence")
STEP_RULES = ("sim", "constant", "persistence")
NAIVE = ("constant", "persistence")
"""The naive rules a forecast is judged against (``replay`` is not a forecast)."""


def mdape(pred, meas) -> float:
    """``median |pred / meas - 1|`` over the entries where both are known (nan if none)."""
    p, m = np.asarray(pred, float), np.asarray(meas, float)
    ok = np.isfinite(p) & np.isfinite(m) & (m > 0)
    return float(np.median(np.abs(p[ok] / m[ok] - 1.0))) if ok.any() else float("nan")


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
    rate_pred = {"sim": float(p_sim.mean()), "persistence": fit_rate}
    brier = {
        "sim": float(np.mean((p_sim - s_held) ** 2)),
        "persistence": float(np.mean((fit_rate - s_held) ** 2)),
    }
    meas_mk = held["measured_makespan_s"].to_numpy()
    makespan = {
        r: mdape(held[f"{'predicted' if r == 'drawn' else r}_makespan_s"].to_numpy(), meas_mk)
        for r in MAKESPAN_RULES
    }
    meas_step = t_held["measured_step_s"].to_numpy()
    step = {r: mdape(t_held[f"{r}_step_s"].to_numpy(), meas_step) for r in STEP_RULES}
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
                    "rate floor": f"{fl['rate']:.2f}",
                    "sim beats persistence (rate)": beats(
                        runs, "rate_abs_error", "sim", ["persistence"]
                    ),
                    "Brier sim / persistence": f"{spread([r['brier']['sim'] for r in runs])} / "
                    f"{spread([r['brier']['persistence'] for r in runs])}",
                    "sim beats persistence (Brier)": beats(runs, "brier", "sim", ["persistence"]),
                    "makespan MdAPE drawn": spread([r["makespan_mdape"]["drawn"] for r in runs]),
                    "replay": spread([r["makespan_mdape"]["replay"] for r in runs]),
                    "constant": spread([r["makespan_mdape"]["constant"] for r in runs]),
                    "persistence": spread([r["makespan_mdape"]["persistence"] for r in runs]),
                    "makespan floor": f"{fl['makespan']:.2f}",
                    "drawn beats naive": beats(runs, "makespan_mdape", "drawn", NAIVE),
                    "step MdAPE sim": spread([r["step_mdape"]["sim"] for r in runs]),
                    "step constant": spread([r["step_mdape"]["constant"] for r in runs]),
                    "step persistence": spread([r["step_mdape"]["persistence"] for r in runs]),
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
