"""Predicted against measured time-to-target of real runs (``rolloutlab compare learning``).

One real run (``--fit``) calibrates the simulator's learning model
(:func:`calibration.learning_fit.fit_learning`: kappa and the initial Beta pass rates) and
a per-step cost model; each run is then predicted from its own settings and compared
with what it measured:

- **reward curve**: the closed-loop mean-field curve
  (:func:`calibration.learning_fit.mean_field_curve`) driven by the run's own per-step G,
  B and lr (for an adaptive controller: the G it actually chose, not a re-simulated
  controller: **simplification**);
- **step time**: ``t_step = c0 + c1 * B * G`` (s), ``c1`` = median over the fit run's
  steps of ``(gen_time + train_time) / (B G)``, ``c0`` = the fit run's median
  ``sync_time`` plus its time between steps (evaluations, checkpoints) per step
  (**modelling choice**: cost linear in rollouts; one G in a static fit run cannot
  separate a per-step intercept of generation from its slope);
- **time to target**: :func:`sim.learning.time_to_target` (trailing mean of
  ``reward_mean`` over 10 steps >= target) on the measured steps table and on the
  predicted curve, so both sides use the same statistic (training reward, not held-out
  accuracy).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from rolloutlab.analysis.real_progress import load_runs
from rolloutlab.calibration.learning_fit import fit_learning, mean_field_curve
from rolloutlab.calibration.run_curve import RunCurve, read_run
from rolloutlab.sim import trace
from rolloutlab.sim.learning import time_to_target

WINDOW = 10
"""Steps in the trailing reward mean of :func:`sim.learning.time_to_target`."""


def _steps(run_dir: Path) -> pl.DataFrame:
    for suffix in (".parquet", ".jsonl"):
        p = Path(run_dir) / f"steps{suffix}"
        if p.exists():
            return trace.read(p, "steps").sort("step")
    raise ValueError(f"{run_dir}: no steps.parquet or steps.jsonl")


def cost_model(steps: pl.DataFrame, curve: RunCurve) -> tuple[float, float]:
    """``(c0, c1)`` of ``t_step = c0 + c1 * B * G`` from a run's steps table (module docstring)."""
    rollouts = np.array([c.size * g for c, g in zip(curve.counts, curve.G, strict=True)])
    busy = (steps["gen_time"] + steps["train_time"]).to_numpy()
    c1 = float(np.median(busy / rollouts))
    span = (steps["t_end"] - steps["t_start"]).to_numpy()
    between = (float(steps["t_end"][-1]) - float(span.sum())) / steps.height
    return float(steps["sync_time"].median()) + max(between, 0.0), c1


def predict(fit: dict, curve: RunCurve, cost: tuple[float, float]) -> pl.DataFrame:
    """Predicted ``step, t_end (s), reward_mean`` of a run with ``curve``'s settings."""
    a, b = (float(x) for x in fit["fit"]["init_pass_rate"]["spec"].split(":")[1].split(","))
    reward = mean_field_curve(fit["kappa"], a, b, curve, fit["lr_ref"])
    per_step = cost[0] + cost[1] * np.array(
        [c.size * g for c, g in zip(curve.counts, curve.G, strict=True)]
    )
    return pl.DataFrame(
        {"step": np.arange(len(reward)), "t_end": np.cumsum(per_step), "reward_mean": reward}
    )


def _ranks(values: list[float | None]) -> list[int]:
    key = [np.inf if v is None else v for v in values]
    order = np.argsort(key, kind="stable")
    ranks = np.empty(len(key), dtype=int)
    ranks[order] = np.arange(1, len(key) + 1)
    return ranks.tolist()


def compare_learning(
    fit_dir: Path, run_dirs: list[Path], target: float
) -> tuple[pl.DataFrame, dict[str, tuple[pl.DataFrame, pl.DataFrame]], dict]:
    """``(table, curves, fit)``: one row per run of ``run_dirs`` (columns of
    ``learning_comparison.csv``), per run ``(measured steps, predicted steps)``, and the
    fitted learning block.

    Raises: ValueError (``RunDataError``, ``ProgressError``) naming a run that cannot be
    read, runs of different tasks, or a target outside (0, 1].
    """
    if not 0 < target <= 1:
        raise ValueError(f"--target-accuracy must be in (0, 1], got {target}")
    runs, _, _ = load_runs([fit_dir, *run_dirs])  # same task, readable
    fit_curve = read_run(fit_dir)
    fit = fit_learning(fit_curve)
    cost = cost_model(_steps(fit_dir), fit_curve)
    rows, curves = [], {}
    for d, ctl in zip(run_dirs, runs["controller"].to_list()[1:], strict=True):
        measured = _steps(d)
        predicted = predict(fit, read_run(d), cost)
        curves[Path(d).name] = (measured, predicted)
        m = time_to_target(measured, target, WINDOW)
        p = time_to_target(predicted, target, WINDOW)
        rows.append(
            {
                "run": Path(d).name,
                "controller": ctl,
                "measured_time_to_target_s": m,
                "predicted_time_to_target_s": p,
                "rel_error": None if m is None or p is None else (p - m) / m,
            }
        )
    table = pl.DataFrame(rows, schema_overrides={"rel_error": pl.Float64})
    table = table.with_columns(
        pl.Series("measured_rank", _ranks(table["measured_time_to_target_s"].to_list())),
        pl.Series("predicted_rank", _ranks(table["predicted_time_to_target_s"].to_list())),
    )
    return table, curves, {**fit, "cost_c0_s": cost[0], "cost_c1_s_per_rollout": cost[1]}


def comparison_figure(
    curves: dict[str, tuple[pl.DataFrame, pl.DataFrame]], target: float, path: str | Path
) -> None:
    """One panel per run: measured and predicted reward (trailing mean of :data:`WINDOW`
    steps) against wall clock (s), the target dashed. Writes ``path``."""
    n = len(curves)
    fig, axes = plt.subplots(1, n, figsize=(3.6 * n, 3.2), squeeze=False, sharey=True)
    for ax, (name, (meas, pred)) in zip(axes[0], curves.items(), strict=True):
        for df, label in ((meas, "measured"), (pred, "predicted")):
            y = df["reward_mean"].rolling_mean(WINDOW, min_samples=WINDOW)
            ax.plot(df["t_end"], y, label=label)
        ax.axhline(target, ls="--", color="grey", lw=1)
        ax.set(title=name, xlabel="wall clock (s)")
    axes[0][0].set_ylabel(f"reward, trailing mean of {WINDOW}")
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
