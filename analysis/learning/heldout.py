"""Time to a *held-out* accuracy target, measured and predicted (``rolloutlab compare
learning --target-on heldout``; docs/learning.md §5).

The training-reward target (:func:`sim.models.learning.time_to_target`, a trailing mean of
``reward_mean``) is a first passage of a noisy statistic: a run whose steps hold few
rollouts crosses a target near its plateau early by noise, and its prompt stream's hard
stretches move it. A held-out evaluation scores the *policy* on a fixed problem set (one
sampled answer per problem, fixed seeds, real/tasks/evaluate.py), which is what a verl
user's ``val-core`` target measures:

- **measured**: the first evaluation (``eval.jsonl`` row, ``step`` >= 0) whose
  ``accuracy`` >= target; steps to target = its ``step`` + 1, time = the run's clock at the
  end of that step (the CPU clock leaves evaluations out, so every setting is charged its
  training steps only);
- **predicted**: runs drawn from the fitted law
  (:func:`calibration.fits.learning_draws.draw_paths`), each scored at the *same*
  evaluation steps by its population pass rate
  (:func:`calibration.fits.learning_draws.population_pass_rate`): the first such step at
  or above the target; the prediction is the median over the draws. The evaluation's own
  sampling error is drawn too: each draw's accuracy at an evaluation is ``Binomial(n_eval,
  pass rate) / n_eval`` (``n_eval`` = the run's ``eval_size``), independently per
  evaluation. It matters: the measured time is a *first passage* of a noisy estimate (sd
  about 0.03 at 256 problems), so on a flat stretch of the curve the noise crosses the
  target long before the population mean does; without it the (G, B) = (4, 4) fit runs
  were predicted at 120 steps against 60 measured (docs/learning.md §5). **Simplification**:
  a real evaluation reuses its problems and seeds, so its errors are partly correlated
  over time; independent draws are the upper bound of that noise's help.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
from rolloutlab.calibration.fits.learning_draws import draw_paths, population_pass_rate
from rolloutlab.calibration.readers.run_curve import RunCurve, RunDataError
from rolloutlab.sim.models.learning import LearningParams


def eval_rows(run_dir: Path) -> pl.DataFrame:
    """``step`` (int, >= 0: the evaluation after that step; -1 = before training) and
    ``accuracy`` of the run's ``eval.jsonl``, sorted by step. Raises RunDataError naming
    the file, line and field when it is missing or a row lacks a field."""
    path = Path(run_dir) / "eval.jsonl"
    if not path.exists():
        raise RunDataError(f"{path}: no such file: --target-on heldout needs the run's evaluations")
    rows = []
    for no, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        for field in ("step", "accuracy"):
            if not isinstance(row.get(field), int | float) or isinstance(row.get(field), bool):
                raise RunDataError(f"{path}: line {no}: field {field!r} missing or not a number")
        rows.append({"step": int(row["step"]), "accuracy": float(row["accuracy"])})
    if not any(r["step"] >= 0 for r in rows):
        raise RunDataError(f"{path}: no evaluation after a training step (step >= 0)")
    return pl.DataFrame(rows).unique("step", keep="last").sort("step")


def measured_heldout(evals: pl.DataFrame, steps: pl.DataFrame, target: float) -> tuple:
    """``(time_s, steps_to_target)`` of the first evaluation at step >= 0 with accuracy >=
    ``target`` (module docstring), ``steps`` the run's steps table on the chosen clock;
    ``(None, None)`` if none."""
    hit = evals.filter((pl.col("step") >= 0) & (pl.col("accuracy") >= target - 1e-12))
    if hit.height == 0:
        return None, None
    e = int(hit["step"][0])
    t_end = steps.sort("step")["t_end"].to_numpy()
    if e >= t_end.size:
        return None, None
    return float(t_end[e]), e + 1


def predicted_heldout(
    params: LearningParams,
    beta: tuple[float, float],
    curve: RunCurve,
    eval_steps: np.ndarray,
    target: float,
    draws: int,
    seed: int,
    n_eval: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(first, median_curve)``: (draws,) steps to target (counted from 1, NaN = never) of
    runs drawn at ``curve``'s G, lr and B, scored at ``eval_steps`` (k,) (>= 0, < T) with
    ``n_eval`` problems' sampling error (None: the population pass rate itself), and the
    (k,) median population pass rate over the draws at those steps (module docstring).
    Raises ValueError when the law collapses within the run or ``n_eval`` < 1."""
    if n_eval is not None and n_eval < 1:
        raise ValueError(f"n_eval: expected >= 1 held-out problems, got {n_eval}")
    rng = np.random.default_rng(seed)
    B = np.array([c.size for c in curve.counts])
    _, theta = draw_paths(
        params, *beta, curve.G, curve.lr, B, curve.dynamic_sampling, draws, rng
    )  # fmt: skip
    e = np.asarray(eval_steps, int)
    pop = population_pass_rate(*beta, theta[:, e])  # (draws, k)
    acc = pop if n_eval is None else rng.binomial(n_eval, np.clip(pop, 0.0, 1.0)) / n_eval
    hit = acc >= target - 1e-12
    first = np.where(hit.any(axis=1), e[hit.argmax(axis=1)] + 1.0, np.nan)
    return first, np.median(pop, axis=0)


def eval_size(run_dir: Path) -> int | None:
    """The run's held-out problems per evaluation (``config.json`` ``config.eval_size``),
    or None when the run does not say."""
    path = Path(run_dir) / "config.json"
    if not path.exists():
        return None
    n = json.loads(path.read_text()).get("config", {}).get("eval_size")
    return int(n) if isinstance(n, int) and n >= 1 else None


def started_above(run_dirs: list[Path], target: float) -> list[str]:
    """One note per run whose evaluation before training (``step`` -1) is already at or
    above ``target``: its measured time still counts from the first evaluation after a
    step (module docstring), so the target says nothing about its learning."""
    notes = []
    for d in run_dirs:
        start = eval_rows(d).filter(pl.col("step") == -1)["accuracy"]
        if start.len() and float(start[0]) >= target - 1e-12:
            notes.append(
                f"note: {Path(d).name} starts at held-out accuracy {float(start[0]):.3f} >= "
                f"target {target} before training: choose a higher target"
            )
    return notes
