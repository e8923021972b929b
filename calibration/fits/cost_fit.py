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

When the steps cannot separate a per-token cost from the intercept (a run at one group
size and batch, whose tokens vary little from step to step), NNLS puts the whole learner
into the constant and a simulator priced with it does not grow the learner with ``B G``.
With ``min_slope_t`` set, :func:`fit_learner` tests the per-token slope first: the
ordinary least-squares slope's t statistic ``slope / se(slope)`` (``se`` from the residual
variance over ``n - 2`` degrees of freedom, the textbook simple-regression formula). Below
``min_slope_t`` the learner is priced through the origin, ``learner_s_per_token =
sum_t train_t / sum_t tokens_t`` (the run's learner seconds per token) and
``learner_const_s = 0``: the learner's work is a forward and backward pass over the
trained tokens, so its time scales with them (docs/learning.md §5 measures the CPU
learner growing with trained rollouts times padded length).
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
    rule: str = "intercept+slope"
    """``intercept+slope`` (NNLS line) or ``origin`` (per-token price through the origin,
    the slope not identified)."""
    slope_t: float = float("nan")
    """OLS slope over its standard error (nan when not computed or fewer than 3 steps;
    ``inf`` for an exact line)."""
    tokens_cv: float = float("nan")
    """Coefficient of variation (sd / mean) of the steps' tokens."""

    def why(self) -> str:
        """One line: which learner rule was used and why."""
        stat = f"slope t {self.slope_t:.2f}, tokens CV {self.tokens_cv:.3f}"
        if self.rule == "origin":
            return f"learner through the origin: per-token slope not identified ({stat})"
        if np.isnan(self.slope_t):
            return "learner intercept + slope (NNLS; identification not tested)"
        return f"learner intercept + slope: per-token slope identified ({stat})"


def slope_t(tokens: np.ndarray, train_s: np.ndarray) -> float:
    """t statistic of the OLS slope of ``train_s`` on ``tokens`` (each ``(n,)``).

    ``slope / se``, ``se^2 = (RSS / (n - 2)) / sum (x - mean x)^2``. Returns nan for fewer
    than 3 steps or tokens without spread, ``+-inf`` for an exact line."""
    x, y = np.asarray(tokens, float), np.asarray(train_s, float)
    sxx = float(np.sum((x - x.mean()) ** 2))
    if len(x) < 3 or sxx <= 1e-12 * max(float(np.sum(x**2)), 1e-300):
        return float("nan")
    slope = float(np.sum((x - x.mean()) * (y - y.mean())) / sxx)
    rss = float(np.sum((y - y.mean() - slope * (x - x.mean())) ** 2))
    se = np.sqrt(rss / (len(x) - 2) / sxx)
    if se == 0.0:
        return float(np.copysign(np.inf, slope)) if slope != 0 else float("nan")
    return slope / float(se)


def fit_learner(
    tokens: np.ndarray,
    train_s: np.ndarray,
    sync_s: np.ndarray,
    *,
    min_slope_t: float | None = None,
) -> LearnerFit:
    """``train_s ~ const + per_token * tokens`` by NNLS; ``sync`` = median.

    Args: per-step ``tokens`` (prompt + response), ``train_s`` and ``sync_s`` (seconds),
    each ``(n_steps,)``; ``min_slope_t``: when given, a slope whose OLS t statistic is below
    it (or not computable) is not identified and the learner is priced through the origin
    (module docstring). Raises: ValueError on fewer than 2 steps, or on no tokens at all.
    """
    tokens, train_s = np.asarray(tokens, float), np.asarray(train_s, float)
    if len(tokens) < 2 or len(tokens) != len(train_s) or len(sync_s) < 1:
        raise ValueError("fit_learner: need >= 2 steps of tokens and train times, >= 1 sync time")
    s = tokens.mean()
    if not s > 0:
        raise ValueError("fit_learner: the steps hold no tokens")
    t = slope_t(tokens, train_s) if min_slope_t is not None else float("nan")
    origin = min_slope_t is not None and not t >= min_slope_t
    if origin:
        coef = np.array([0.0, float(train_s.sum() / tokens.sum()) * s])
    else:
        coef, _ = optimize.nnls(np.column_stack([np.ones_like(tokens), tokens / s]), train_s)
    pred = coef[0] + coef[1] * tokens / s
    r2 = 1.0 - np.sum((train_s - pred) ** 2) / max(np.sum((train_s - train_s.mean()) ** 2), 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):  # a step without an update trains 0 s
        mape = float(np.mean(np.abs(pred / train_s - 1)))
    return LearnerFit(
        learner_const_s=float(coef[0]),
        learner_s_per_token=float(coef[1] / s),
        mape=mape,
        r2=float(r2),
        sync_s=float(np.median(sync_s)),
        rule="origin" if origin else "intercept+slope",
        slope_t=t,
        tokens_cv=float(tokens.std() / s),
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
