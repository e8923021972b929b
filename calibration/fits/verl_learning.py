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


def heldout(run_dir: str, fit: dict, G: int, skip_steps: int) -> dict:
    """Predict another verl run's reward curve (its own lr per step) with ``fit``'s
    a, b, kappa: ``{"run", "steps", "rmse", "r2_vs_constant", blocks}``. Raises
    :class:`calibration.readers.verl_tb.VerlLogError` as :func:`read_verl_curve`."""
    c = read_verl_curve(run_dir)
    y, lr = c["reward"][skip_steps:], c["lr"][skip_steps:]
    pred = expected_curve(fit["a"], fit["b"], fit["kappa"], lr, G, fit["lr_ref"])
    return {
        "run": Path(run_dir).name,
        "steps": int(y.size),
        **quality(pred, y),
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
        "heldout": [heldout(r, f, group_size, skip_steps) for r in checks],
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
