"""Per-step cost of a real run as ``rolloutlab compare learning`` prices it:
``t_step = c0 + c1 * (B G)^p`` seconds (on the wall or the CPU clock), ``B G`` the step's
rollouts.

- ``c0``: the fit runs' mean ``sync_time`` plus their time between steps (evaluations,
  checkpoints) per step;
- one rollout count in the fit runs: ``p = 1`` and ``c1`` = their generation + training
  time over their rollouts (one count cannot separate a per-step intercept from a slope);
- two or more: ``c1`` and ``p`` by least squares of ``log busy = log c1 + p log(B G)``
  through the mean busy time (generation + training) of each rollout count. **Modelling choice**, measured: a
  straight line with its intercept clipped at zero (this module's first form) priced the
  graph-walk grid's 16-rollout steps 41 % above their 0.048 CPU s (its free intercept was
  negative), because the cost grows faster than the rollouts (the training batch pads to
  its longest sequence, and a larger batch holds a longer one): ``p`` = 1.12 there
  (docs/learning.md §5).
"""

from __future__ import annotations

import numpy as np
import polars as pl
from rolloutlab.calibration.readers.run_curve import RunCurve

Cost = tuple[float, float, float]
"""``(c0 s, c1 s per rollout^p, p)``."""


def busy_time(cost: Cost, rollouts):
    """``c1 * rollouts^p`` (s; scalar or array like ``rollouts``): a step's generation +
    training time."""
    return cost[1] * np.power(np.asarray(rollouts, float), cost[2])


def cost_model(steps: pl.DataFrame, curve: RunCurve) -> tuple[float, float]:
    """``(c0, c1)`` of ``t_step = c0 + c1 * B * G`` from a run's steps table (module
    docstring): ``c1`` = total generation + training time over total rollouts, ``c0`` =
    mean sync time + the time between steps per step, so the run's own clock is
    reproduced at its last step."""
    rollouts = rollouts_per_step(curve)
    busy = (steps["gen_time"] + steps["train_time"]).to_numpy()
    c1 = float(busy.sum() / rollouts.sum())
    span = (steps["t_end"] - steps["t_start"]).to_numpy()
    between = (float(steps["t_end"][-1]) - float(span.sum())) / steps.height
    return float(steps["sync_time"].mean()) + max(between, 0.0), c1


def pooled_cost(steps: list[pl.DataFrame], curves: list[RunCurve]) -> Cost:
    """``(c0, c1, p)`` over several fit runs (module docstring): ``c0`` the mean of their
    :func:`cost_model` intercepts; one rollout count: ``c1`` the mean of their slopes and
    ``p = 1``; two or more: the log-log least-squares ``c1``, ``p`` through each rollout
    count's *mean* busy time (a fit to the steps' logs would fit their geometric mean,
    which priced the grid's fit runs 5-10 % under their own clock)."""
    costs = [cost_model(s, c) for s, c in zip(steps, curves, strict=True)]
    c0, c1 = float(np.mean([c[0] for c in costs])), float(np.mean([c[1] for c in costs]))
    x = np.concatenate([rollouts_per_step(c) for c in curves])
    y = np.concatenate([(s["gen_time"] + s["train_time"]).to_numpy() for s in steps])
    counts = np.unique(x)
    mean = np.array([y[x == v].mean() for v in counts])  # arithmetic: the clock sums steps
    ok = mean > 0
    if ok.sum() < 2:
        return c0, c1, 1.0
    p, log_c1 = np.polyfit(np.log(counts[ok].astype(float)), np.log(mean[ok]), 1)
    return c0, float(np.exp(log_c1)), float(p)


def step_clock(curve: RunCurve, cost: Cost) -> np.ndarray:
    """Predicted ``t_end`` (T,) in s: cumulative ``c0 + c1 * (B G)^p`` at ``curve``'s steps."""
    return np.cumsum(cost[0] + busy_time(cost, rollouts_per_step(curve)))


def rollouts_per_step(curve: RunCurve) -> np.ndarray:
    """(T,) rollouts ``B G`` of each step of a run (its trained groups times their G)."""
    return np.array([c.size * g for c, g in zip(curve.counts, curve.G, strict=True)])


def extrapolation_notes(
    cost_curves: dict[str, RunCurve], real_curves: dict[str, RunCurve]
) -> list[str]:
    """One stderr line per predicted run whose steps use more rollouts than any step the
    cost was fitted on (``{name: curve}`` each), and a first line naming the fitted range;
    [] when none. Priced there, the cost law is an extrapolation: on graph-walk, a law
    fitted on 16-64 rollouts a step priced 256 at 0.46 CPU s against 0.74 measured
    (docs/learning.md §5)."""
    fitted = np.concatenate([rollouts_per_step(c) for c in cost_curves.values()])
    top = int(fitted.max()) if fitted.size else 0
    over = {n: int(rollouts_per_step(c).max()) for n, c in real_curves.items()}
    over = {n: r for n, r in over.items() if r > top}
    if not over:
        return []
    head = (f"note: the step cost is fitted on {int(fitted.min())}-{top} rollouts a step; "
            f"{len(over)} --real run(s) go beyond, priced by extrapolation "
            "(give --cost-from runs that span them; docs/learning.md §5)")  # fmt: skip
    return [head] + [f"note:   {n}: up to {r} rollouts a step" for n, r in sorted(over.items())]
