"""The ``pass_rate`` and ``learning`` blocks from a verl run's training-reward curve
(``rolloutlab calibrate learning --verl-tb``; fit: :mod:`calibration.fits.reward_curve_fit`,
docs/learning.md §4)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rolloutlab.calibration.fits.reward_curve_fit import (
    expected_curve,
    fit_reward_curve,
    quality,
    read_verl_curve,
    sampling_noise_sd,
)
from rolloutlab.calibration.readers.verl_tb import event_files
from rolloutlab.calibration.scenarios.writer import rolloutlab_version, sha256_file
from rolloutlab.sim.models.learning import LearningParams


def _blocks_of_10(v: np.ndarray) -> list[float]:
    return [round(float(b.mean()), 4) for b in np.array_split(v, max(v.size // 10, 1))]


CURVE_RULES = ("constant", "persistence", "linear", "lookup")
"""Naive rules for a held-out reward curve, each fitted on the fit run's curve only
(:func:`naive_curves`)."""


def naive_curves(
    fit_step: np.ndarray, fit_y: np.ndarray, step: np.ndarray
) -> dict[str, np.ndarray]:
    """The naive predictions of a reward curve at ``step`` ((T,) verl global steps) from
    the fit run's curve (``fit_step``, ``fit_y``: (F,) the steps the fit used): ``constant``
    = its mean; ``persistence`` = its last value carried forward; ``linear`` = the least
    squares line in the step (``numpy.polyfit``, degree 1); ``lookup`` = its reward at the
    same step (NaN at a step it did not log). Each (T,)."""
    fit_step, fit_y = np.asarray(fit_step, float), np.asarray(fit_y, float)
    step = np.asarray(step, float)
    slope, intercept = np.polyfit(fit_step, fit_y, 1)
    at = dict(zip(fit_step.tolist(), fit_y.tolist()))
    return {
        "constant": np.full(step.size, fit_y.mean()),
        "persistence": np.full(step.size, fit_y[-1]),
        "linear": intercept + slope * step,
        "lookup": np.array([at.get(s, np.nan) for s in step.tolist()]),
    }


def heldout(
    run_dir: str, fit: dict, G: int, skip_steps: int, fit_step: np.ndarray, fit_y: np.ndarray
) -> dict:
    """Predict another verl run's reward curve (its own lr per step) with ``fit``'s
    a, b, kappa: ``{"run", "steps", "rmse", "r2_vs_constant", "baselines_rmse", blocks}``;
    ``baselines_rmse`` holds the RMSE of each of :data:`CURVE_RULES`
    (:func:`naive_curves` on the fit run's ``fit_step``, ``fit_y``; ``lookup`` over the
    steps both runs logged) and ``best_naive`` the rule with the least. ``r2_vs_constant``
    is against the held-out run's own mean (which reads the run). Raises
    :class:`calibration.readers.verl_tb.VerlLogError` as :func:`read_verl_curve`."""
    c = read_verl_curve(run_dir)
    y, lr = c["reward"][skip_steps:], c["lr"][skip_steps:]
    pred = expected_curve(fit["a"], fit["b"], fit["kappa"], lr, G, fit["lr_ref"])
    base = {}
    for rule, p in naive_curves(fit_step, fit_y, c["step"][skip_steps:]).items():
        ok = np.isfinite(p)
        base[rule] = float(np.sqrt(np.mean((p[ok] - y[ok]) ** 2))) if ok.any() else None
    scored = {k: v for k, v in base.items() if v is not None}
    return {
        "run": Path(run_dir).name,
        "steps": int(y.size),
        **quality(pred, y),
        "baselines_rmse": base,
        "best_naive": min(scored, key=scored.__getitem__) if scored else None,
        "reward_blocks_of_10": _blocks_of_10(y),
        "predicted_blocks_of_10": _blocks_of_10(pred),
    }


def verl_blocks(
    run_dir: str,
    group_size: int,
    prompts: int,
    dispersion: float,
    skip_steps: int,
    checks: tuple[str, ...],
    command: str,
    note: str | None,
) -> tuple[dict, dict]:
    """(pass_rate block, learning block) fitted to ``run_dir``'s ``critic/score/mean``
    curve at its own lr (``lr_ref`` = the run's median lr, 6 significant digits).
    Raises ValueError (a :class:`VerlLogError` naming the run and tag) on a bad run or
    when fewer than 4 steps remain after ``skip_steps``."""
    c = read_verl_curve(run_dir)
    y, lr = c["reward"][skip_steps:], c["lr"][skip_steps:]
    if y.size < 4:
        raise ValueError(
            f"--skip-steps {skip_steps}: leaves {y.size} steps of {run_dir}; need >= 4"
        )
    lr_ref = float(f"{np.median(lr):.6g}")
    f = fit_reward_curve(y, lr, group_size, lr_ref, dispersion)
    a, b, kappa = f["a"], f["b"], f["kappa"]
    noise = sampling_noise_sd(a, b, kappa, lr, group_size, lr_ref, prompts)
    steps = c["step"][skip_steps:]
    pred = np.asarray(f["predicted"])
    # validation at step v is logged after v updates: the policy that samples step v + 1
    at = {int(s): i for i, s in enumerate(steps)}
    val = [(int(s), float(v), at.get(int(s) + 1)) for s, v in zip(c["val_step"], c["val"])]
    prov = {
        "run_dir": run_dir,
        "event_files_sha256": {p.name: sha256_file(p) for p in event_files(run_dir)},
        "command": command,
        "rolloutlab_version": rolloutlab_version(),
        "assumed": {
            "group_size": group_size,
            "prompts_per_step": prompts,
            "why": "verl's logs do not record n or the batch; G = 5, B = 1024 are the "
            "recipe's example script values (inferred; only the noise estimate uses B)",
        },
    } | ({"note": note} if note else {})
    fit = {
        "method": "least squares of the mean-field reward curve (expected_signal, Beta "
        "quadrature on a logit grid), a + b fixed",
        "tag": "critic/score/mean",
        "steps": int(y.size),
        "skip_steps": skip_steps,
        "first_step": int(steps[0]),
        "lr_filled_steps": c["lr_filled"],
        "dispersion_fixed": dispersion,
        "se": f["se"],
        "rmse": f["rmse"],
        "r2_vs_constant": f["r2_vs_constant"],
        "sampling_noise_rmse": float(np.sqrt(np.mean(noise**2))),
        "converged": f["converged"],
        "reward_blocks_of_10": _blocks_of_10(y),
        "predicted_blocks_of_10": _blocks_of_10(pred),
        "validation": [
            {
                "step": s,
                "val_reward": v,
                "model_train_reward": None if i is None else float(pred[i]),
            }
            for s, v, i in val
        ],
        "heldout": [heldout(r, f, group_size, skip_steps, steps, y) for r in checks],
    }
    pass_rate = {
        "spec": f"beta:{a:.4g},{b:.4g}",
        "coupling": 0.0,
        "provenance": prov | {"coupling_note": "no per-sample lengths in the log: coupling 0"},
        "fit": {"alpha": a, "beta": b, "mean_pass_rate": a / (a + b), **fit},
    }
    params = LearningParams(kappa=kappa, lr_ref=lr_ref)
    learning = {**params.to_dict(), "fit": fit, "provenance": prov}
    return pass_rate, learning
