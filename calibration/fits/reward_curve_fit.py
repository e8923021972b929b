"""Fit the learning-progress model (:mod:`sim.models.learning`) to a per-step mean-reward curve
(docs/learning.md §4), e.g. verl's ``critic/score/mean`` of a GRPO run.

The model's expected (mean-field) recursion, prompts fresh every step with
``p0 ~ Beta(a, b)``, G samples a group:

    reward_t  = E_{p0}[sigmoid(logit p0 + theta_t)]
    theta_t+1 = theta_t + kappa * (lr_t / lr_ref) * E_{p0}[expected_signal(p_t, G)]

(:func:`sim.models.learning.expected_signal` = ``p (1 - p) (1 - 1/G)``; the update goes through
:meth:`sim.models.learning.LearningModel.apply_signal`, so the simulator's collapse logic holds
too). Expectations over Beta are quadratures on a uniform grid in ``logit p0``
(:func:`calibration.fits.beta_grid.beta_logit_grid`), no Monte Carlo.

Parameters are fitted by least squares (``scipy.optimize.least_squares``) in
``(logit m, log kappa)`` with ``m = a / (a + b)`` and the dispersion ``a + b`` fixed: a
mean curve does not identify ``a + b`` (docs/learning.md §4 shows the flat profile and the
degenerate unconstrained optimum), so it is an input. Standard errors: Gaussian least
squares, ``cov = s^2 (J^T J)^-1`` (s^2 = residual variance), delta method to a, b, kappa.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from rolloutlab.calibration.fits.beta_grid import beta_logit_grid
from rolloutlab.calibration.readers.verl_tb import VerlLogError, read_run
from rolloutlab.sim.models.learning import LearningModel, LearningParams
from rolloutlab.sim.models.learning_noise import (
    effective_samples,
    efficiency,
    expected_group_signal,
    informative_share,
)
from scipy import optimize, special

REWARD_TAG = "critic/score/mean"
"""verl's per-step mean training reward (``compute_data_metrics``)."""
LR_TAG = "actor/lr"
"""verl's actor learning rate per step."""
VAL_TAG = "val-core/openai/gsm8k/reward/mean@1"
"""verl's validation reward on GSM8K (logged every ``test_freq`` steps)."""

DEFAULT_DISPERSION = 0.3359
"""a + b fixed by default: the beta-binomial fit of Qwen2.5-Math-Instruct's per-sample
MATH correctness (docs/learning.md §1, Beta(0.307, 0.0286)), the only per-prompt
dispersion measured here for a Qwen2.5 model (**modelling choice**)."""


def _moments(
    a, b, kappa, lr, G, lr_ref, dynamic_sampling=False, prompts=None, theta_max=math.inf,
    b_noise=0.0, advantage="mean", rho=0.0,
):  # fmt: skip
    """(E p_t, E p_t^2), each (T,), along the mean-field recursion (module docstring).
    ``b_noise > 0`` (needs ``prompts``): each step's signal times the noise law's expected
    share ``1 / (1 + b_noise / n)`` at the expected effective samples ``n = B E[1 - p^G
    - (1 - p)^G] G / (1 + (G - 1) rho)`` (:mod:`sim.models.learning_noise`; the share at the mean n, a
    **simplification**: E[1/(1 + b/n)] <= 1/(1 + b/E n) by concavity, so slightly fast)."""
    if not (a > 0 and b > 0):
        raise ValueError(f"Beta(a, b): expected a, b > 0, got {a}, {b}")
    lr = np.atleast_1d(np.asarray(lr, float))
    G = np.broadcast_to(np.asarray(G, float), lr.shape)
    floor = np.broadcast_to(1e-12 if prompts is None else 1 / np.asarray(prompts, float), lr.shape)
    u, w = beta_logit_grid(a, b)
    model = LearningModel(LearningParams(kappa=kappa, lr_ref=lr_ref, theta_max=theta_max))
    m1, m2 = np.empty(lr.size), np.empty(lr.size)
    for t in range(lr.size):
        p = special.expit(u + model.theta)  # = model.current(p0) in the logit domain
        m1[t], m2[t] = w @ p, w @ p**2
        signal = float(w @ expected_group_signal(p, int(G[t]), advantage))
        share = float(w @ informative_share(p, int(G[t])))
        if dynamic_sampling:  # the loss is over the kept (informative) share of the batch
            signal /= max(share, float(floor[t]))
        if b_noise > 0:
            groups = float(prompts[t] if np.ndim(prompts) else prompts) * share
            signal *= float(efficiency(effective_samples(groups, G[t], rho), b_noise))
        model.apply_signal(np.array([signal]), float(lr[t]), None, t, 1)
    return m1, m2


def expected_curve(
    a, b, kappa, lr, G, lr_ref, dynamic_sampling=False, prompts=None, theta_max=math.inf,
    b_noise=0.0, advantage="mean", rho=0.0,
) -> np.ndarray:  # fmt: skip
    """Mean pass rate (T,) before each step's update under the mean-field recursion
    (module docstring). ``lr``: (T,) per step; ``G``, ``prompts`` (B): scalar or (T,);
    ``theta_max``: the shift's capacity (:class:`LearningParams`; inf = linear);
    ``b_noise``, ``advantage``, ``rho``: the noise law's (:class:`LearningParams`; b_noise > 0
    needs ``prompts``).

    With ``dynamic_sampling`` only informative groups are trained and the loss is over
    them: the step's signal is divided by the kept share ``E[1 - p^G - (1 - p)^G]``
    (DAPO §3.2), at least ``1 / prompts`` (one group) when B is given.
    Raises ValueError on a, b <= 0, kappa < 0 (:class:`LearningParams`) or lr <= 0
    (:meth:`LearningModel.apply_signal`).
    """
    if b_noise > 0 and prompts is None:
        raise ValueError("expected_curve: b_noise > 0 needs prompts (B)")
    return _moments(
        a, b, kappa, lr, G, lr_ref, dynamic_sampling, prompts, theta_max, b_noise, advantage, rho
    )[0]


def sampling_noise_sd(a, b, kappa, lr, G, lr_ref, prompts) -> np.ndarray:
    """(T,) standard deviation of one step's mean reward over ``prompts`` fresh prompts
    x G samples along the expected curve: ``sqrt(Var p / B + E[p (1 - p)] / (B G))``
    (law of total variance, beta-binomial). Raises ValueError as :func:`expected_curve`."""
    m1, m2 = _moments(a, b, kappa, lr, G, lr_ref)
    return np.sqrt((m2 - m1**2) / prompts + (m1 - m2) / (prompts * G))


def quality(pred: np.ndarray, obs: np.ndarray) -> dict:
    """RMSE and R^2 against the constant (mean) curve of ``pred`` vs ``obs`` (both (T,))."""
    r = np.asarray(pred) - np.asarray(obs)
    sse, sst = float(r @ r), float(((obs - obs.mean()) ** 2).sum())
    return {"rmse": math.sqrt(sse / r.size), "r2_vs_constant": 1 - sse / sst if sst else None}


def fit_reward_curve(
    reward: np.ndarray,
    lr: np.ndarray,
    G: int,
    lr_ref: float,
    dispersion: float = DEFAULT_DISPERSION,
) -> dict:
    """Least-squares fit of (m, kappa) at fixed ``a + b = dispersion`` (module docstring).

    reward, lr: (T,) per step, T >= 4, rewards in [0, 1], lr > 0. Returns a dict with
    ``a, b, kappa, lr_ref, dispersion``, ``se`` (a, b, kappa, mean), ``rmse``,
    ``r2_vs_constant``, ``residual_sd``, ``predicted`` (T,) list, ``converged``.
    Raises ValueError on bad shapes/values.
    """
    y, lr = np.asarray(reward, float), np.asarray(lr, float)
    if y.ndim != 1 or y.shape != lr.shape or y.size < 4:
        raise ValueError(f"reward, lr: expected equal (T,) arrays with T >= 4, got {y.shape}")
    if np.any(~((y >= 0) & (y <= 1))) or np.any(~(lr > 0)) or not dispersion > 0:
        raise ValueError("reward in [0, 1], lr > 0 and dispersion > 0 expected")
    s = float(dispersion)

    def resid(x):
        m = special.expit(x[0])
        return expected_curve(m * s, (1 - m) * s, math.exp(x[1]), lr, G, lr_ref) - y

    m0 = float(np.clip(y[0], 0.02, 0.98))
    fits = [optimize.least_squares(resid, [special.logit(m0), math.log(k0)]) for k0 in (0.3, 3)]
    best = min(fits, key=lambda r: r.cost)
    m, kappa = float(special.expit(best.x[0])), float(math.exp(best.x[1]))
    s2 = float(best.fun @ best.fun) / (y.size - 2)
    cov = s2 * np.linalg.pinv(best.jac.T @ best.jac)
    se_m = m * (1 - m) * math.sqrt(cov[0, 0])
    pred = best.fun + y
    return {
        "a": m * s,
        "b": (1 - m) * s,
        "kappa": kappa,
        "lr_ref": lr_ref,
        "dispersion": s,
        "se": {
            "a": s * se_m,
            "b": s * se_m,
            "kappa": kappa * math.sqrt(cov[1, 1]),
            "mean": se_m,
        },
        **quality(pred, y),
        "residual_sd": math.sqrt(s2),
        "predicted": [float(v) for v in pred],
        "converged": bool(best.success),
    }


def read_verl_curve(run_dir: str) -> dict:
    """Per-step training reward and lr of a verl TensorBoard run (``critic/score/mean``,
    ``actor/lr``; steps where the reward is logged, in order; an unlogged lr takes the
    previous step's) and the validation curve (``val-core/...``, when logged).

    Returns ``{"step", "reward", "lr", "lr_filled", "val_step", "val"}`` (numpy arrays).
    Raises :class:`VerlLogError` naming the run and the tag when ``critic/score/mean`` or
    ``actor/lr`` is missing, a value is outside its range, or fewer than 4 steps remain.
    """
    table = read_run(run_dir)
    for tag in (REWARD_TAG, LR_TAG):
        if tag not in table.columns:
            raise VerlLogError(f"{run_dir}: missing tag {tag!r} (the learning fit needs it)")
    rows = table.drop_nulls(REWARD_TAG)
    filled = int(rows[LR_TAG].null_count())
    rows = rows.with_columns(pl.col(LR_TAG).forward_fill().backward_fill())
    y, lr = rows[REWARD_TAG].to_numpy(), rows[LR_TAG].to_numpy()
    if rows.height < 4:
        raise VerlLogError(f"{run_dir}: tag {REWARD_TAG!r} has {rows.height} steps; need >= 4")
    for tag, ok in ((REWARD_TAG, (y >= 0) & (y <= 1)), (LR_TAG, lr > 0)):
        if not np.all(ok):
            step = int(rows["step"][int(np.argmin(ok))])
            raise VerlLogError(f"{run_dir}: tag {tag!r} at step {step} is out of range")
    val = table.drop_nulls(VAL_TAG) if VAL_TAG in table.columns else table.clear()
    return {
        "step": rows["step"].to_numpy(),
        "reward": y,
        "lr": lr,
        "lr_filled": filled,
        "val_step": val["step"].to_numpy(),
        "val": val[VAL_TAG].to_numpy() if val.height else np.array([]),
    }
