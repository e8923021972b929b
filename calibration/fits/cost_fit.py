"""Fit :class:`sim.models.cost.LinearCost` to logged step times.

Decode/prefill coefficients and the per-phase overhead
``theta = [a_s, b_s, c_s, prefill_s_per_token, gen_overhead_s]`` are fitted
to the generation time of each step (verl ``timing_s/gen``): the step's lengths are drawn
to match its logged length statistics (:func:`draw_step_lengths`, fixed seeds), the
engine schedule gives per-worker features ``F_w`` (:mod:`sim.engine.features`) and the
predicted generation time is ``gen_overhead_s + max_w F_w . theta[:4]``, averaged over ``R`` draws. ``theta >= 0``
minimises the squared relative errors ``sum_t ((pred_t - gen_t) / gen_t)^2``
(``scipy.optimize.least_squares`` with bounds; a max of linear functions, so the
problem is piecewise linear least squares).

Learner: ``train_t = learner_const_s + learner_s_per_token * tokens_t`` by non-negative
least squares (``scipy.optimize.nnls``), with ``train_t`` the sum of verl's
``timing_s/update_actor + timing_s/old_log_prob + timing_s/ref`` and ``tokens_t`` =
``perf/total_num_tokens`` (prompt + response). Weight sync: ``sync_s`` = median of
``timing_s/reshard``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rolloutlab.sim.engine.core import EngineConfig
from rolloutlab.sim.engine.features import schedule_features
from rolloutlab.sim.models.cost import LinearCost
from rolloutlab.sim.models.lengths import LognormalLengths
from scipy import optimize


@dataclass(frozen=True)
class StepDraw:
    """What is known of one logged step, to draw its lengths from."""

    step: int
    mu: float
    """Fitted mean of log length (log tokens)."""
    sigma: float
    """Fitted total standard deviation of log length."""
    max: int
    """Logged longest response (tokens)."""
    min: int
    """Logged shortest response (tokens)."""
    n_clipped: int
    """Logged responses at the cap (``clip_ratio * n``)."""
    prompt_tokens: int
    """Prompt length used for every prompt (logged ``prompt_length/mean``, rounded)."""


def draw_step_lengths(
    d: StepDraw, icc: float, B: int, G: int, cap: int, rng: np.random.Generator
) -> np.ndarray:
    """``(B, G)`` lengths (tokens) from the step's fitted hierarchical lognormal, with the
    logged extremes imposed: the ``n_clipped`` longest draws are set to ``cap`` (if none,
    the longest is set to the logged ``max`` and no draw exceeds it); the shortest is set
    to the logged ``min`` and no draw is below it. The makespan is driven by the longest
    rollouts, so matching them matters more than the shape of the bulk.
    """
    sp, sw = np.sqrt(icc) * d.sigma, np.sqrt(1 - icc) * d.sigma
    L = LognormalLengths(d.mu, sp, sw, cap).sample(rng, B, G)  # (B, G)
    flat = L.ravel()
    order = np.argsort(flat, kind="stable")
    if d.n_clipped > 0:
        flat[order[-d.n_clipped :]] = cap
        flat[order[: -d.n_clipped]] = np.minimum(flat[order[: -d.n_clipped]], cap - 1)
    else:
        flat[:] = np.minimum(flat, d.max)
        flat[order[-1]] = d.max
    flat[:] = np.maximum(flat, d.min)
    flat[order[0]] = d.min
    return flat.reshape(B, G)


def step_features(
    draws: list[StepDraw],
    icc: float,
    B: int,
    G: int,
    cap: int,
    config: EngineConfig,
    replicates: int = 2,
    seed: int = 0,
) -> np.ndarray:
    """Schedule features ``(n_steps, replicates, n_workers, 4)`` of each step's draws;
    the RNG of draw ``r`` of step ``s`` is seeded by ``(seed, s, r)``."""
    out = np.zeros((len(draws), replicates, config.n_workers, 4))
    for i, d in enumerate(draws):
        for r in range(replicates):
            L = draw_step_lengths(d, icc, B, G, cap, np.random.default_rng([seed, d.step, r]))
            out[i, r] = schedule_features(L, np.full(B, d.prompt_tokens), config)
    return out


def predict_gen_s(features: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Predicted generation time (s) per step: the per-phase overhead plus the mean over
    draws of the slowest worker. ``features`` ``(n_steps, R, W, 4)``, ``theta`` ``(5,)``
    = ``(a_s, b_s, c_s, prefill_s_per_token, gen_overhead_s)`` -> ``(n_steps,)``."""
    return theta[4] + (features @ theta[:4]).max(axis=2).mean(axis=1)


@dataclass(frozen=True)
class DecodeFit:
    """Fitted decode/prefill coefficients and fit quality."""

    theta: tuple[float, float, float, float, float]
    """``(a_s, b_s, c_s, prefill_s_per_token, gen_overhead_s)``."""
    mape: float
    """Mean |pred/gen - 1| over the fit steps."""
    rel_se: tuple[float, float, float, float, float]
    """Relative standard errors of theta from the Jacobian (inf: not identified)."""


def fit_decode(features: np.ndarray, gen_s: np.ndarray, fit_prefill: bool = False) -> DecodeFit:
    """Fit ``theta >= 0`` to generation times; see the module docstring.

    Args: ``features`` ``(n_steps, R, W, 4)``; ``gen_s`` ``(n_steps,)`` seconds;
    ``fit_prefill``: also fit ``prefill_s_per_token`` (else it is 0). With a fixed
    prompt batch the prefill tokens barely change between steps, so that coefficient is
    not identified and soaks up any per-step overhead of the generation phase.
    Raises: ValueError on fewer than 2 steps or non-positive times.
    """
    gen_s = np.asarray(gen_s, dtype=float)
    if len(gen_s) < 2 or (gen_s <= 0).any() or features.shape[0] != len(gen_s):
        raise ValueError(
            "fit_decode: need >= 2 steps with positive generation times "
            "and one feature block per step"
        )
    # x_j = theta_j / scale_j is O(1): each term alone would explain a fifth of the time
    med = np.append(np.median(features.reshape(-1, 4), axis=0), 1.0)
    scale = np.where(med > 0, np.median(gen_s) / (5 * np.maximum(med, 1e-300)), 0.0)
    if not fit_prefill:
        scale[3] = 0.0

    def resid(x):
        return predict_gen_s(features, x * scale) / gen_s - 1.0

    starts = (
        np.full(5, 1.0),
        np.array([4.0, 0, 0, 0, 1.0]),
        np.array([0, 4.0, 0, 0, 1.0]),
        np.array([0, 0, 4.0, 0, 1.0]),
    )
    best = min(
        (optimize.least_squares(resid, x0, bounds=(0, np.inf), x_scale=1.0) for x0 in starts),
        key=lambda res: res.cost,
    )
    theta = best.x * scale
    J = best.jac
    dof = max(len(gen_s) - 5, 1)
    cov = np.linalg.pinv(J.T @ J) * (2 * best.cost / dof)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(scale > 0, np.sqrt(np.abs(np.diag(cov))) / np.abs(best.x), 0.0)
    mape = float(np.mean(np.abs(resid(best.x))))
    a, b, c, p, o = (float(v) for v in theta)
    se_a, se_b, se_c, se_p, se_o = (float(v) if np.isfinite(v) else float("inf") for v in rel)
    return DecodeFit(theta=(a, b, c, p, o), mape=mape, rel_se=(se_a, se_b, se_c, se_p, se_o))


@dataclass(frozen=True)
class LearnerFit:
    """Learner-step and weight-sync fit."""

    learner_const_s: float
    learner_s_per_token: float
    mape: float
    """Mean |pred/train - 1| over the steps used."""
    r2: float
    """Coefficient of determination of the line."""
    sync_s: float
    """Median of the logged weight-sync times."""


def fit_learner(tokens: np.ndarray, train_s: np.ndarray, sync_s: np.ndarray) -> LearnerFit:
    """``train_s ~ const + per_token * tokens`` by NNLS; ``sync`` = median.

    Args: per-step ``tokens`` (prompt + response), ``train_s`` and ``sync_s`` (seconds),
    each ``(n_steps,)``. Raises: ValueError on fewer than 2 steps.
    """
    tokens, train_s = np.asarray(tokens, float), np.asarray(train_s, float)
    if len(tokens) < 2 or len(tokens) != len(train_s) or len(sync_s) < 1:
        raise ValueError("fit_learner: need >= 2 steps of tokens and train times, >= 1 sync time")
    s = tokens.mean()
    A = np.column_stack([np.ones_like(tokens), tokens / s])
    coef, _ = optimize.nnls(A, train_s)
    pred = A @ coef
    r2 = 1.0 - np.sum((train_s - pred) ** 2) / max(np.sum((train_s - train_s.mean()) ** 2), 1e-300)
    return LearnerFit(
        learner_const_s=float(coef[0]),
        learner_s_per_token=float(coef[1] / s),
        mape=float(np.mean(np.abs(pred / train_s - 1))),
        r2=float(r2),
        sync_s=float(np.median(sync_s)),
    )


def to_cost(decode: DecodeFit, learner: LearnerFit) -> LinearCost:
    """The :class:`LinearCost` of both fits."""
    a, b, c, p, overhead = decode.theta
    return LinearCost(
        a_s=a,
        b_s=b,
        c_s=c,
        prefill_s_per_token=p,
        gen_overhead_s=overhead,
        learner_const_s=learner.learner_const_s,
        learner_s_per_token=learner.learner_s_per_token,
        sync_s=learner.sync_s,
    )
