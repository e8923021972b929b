"""Staleness-learning-rate collapse model: a stochastic drift of the policy in a
low-dimensional surrogate space (PAPERS.md §2, Song et al. 2026; docs/staleness.md).

Sync-interval mode: the behaviour policy ``phi`` is refreshed to the learner policy
``theta`` every ``S`` learner steps (``M = T / S`` weight syncs). Learner step ``t``
(0-based) consumes rollouts of staleness ``s_t = t mod S`` versions and applies

    theta_{t+1} = theta_t + eta * u_t,
    u_t = g_on + delta_t + xi_t                                  (PAPERS.md §2)
    g_on    = G_on * e_0                 persistent on-policy surrogate gradient H_on
    delta_t = L_lag * (theta_t - phi_t)  staleness bias H(theta, phi) - H(theta, theta)
    xi_t    ~ N(0, (sigma_prompt^2 / (B d)) I_d)   zero-mean sampling noise, |xi| ~ 1/sqrt(B)

so ``|delta_t| <= L_lag * s_t * eta * G_upd = O(S * eta)`` arises from the policy lag
itself. Collapse (first step that fires, 1-based ``t_collapse``):
- stale-rollout: intra-cycle drift ``|theta_{t+1} - phi_t| > R_batch``;
- horizon: cumulative drift ``|theta_{t+1} - theta_0| > R_crit``.
Regime: ``ballistic`` when the mean cosine similarity of successive updates is at
least ``ballistic_cos``, else ``diffusive``.

Two paths give identical results: :func:`simulate` (one run, a plain loop: the
reference) and :func:`simulate_batch` (many runs at once, vectorised over runs).
Noise depends only on ``(seed, T, d)``, so runs sharing a seed share their noise
(common random numbers across S and eta).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

FAILURE_NONE, FAILURE_STALE, FAILURE_HORIZON = "none", "stale_rollout", "horizon"
_FAILURES = (FAILURE_NONE, FAILURE_STALE, FAILURE_HORIZON)


@dataclass(frozen=True)
class StalenessParams:
    """Constants of the collapse model (surrogate units; a later fit replaces them).

    Defaults are chosen so the default ``rolloutlab stability`` grid (S in 1..32,
    T = 1000) shows both regimes: horizon-limited for S <= 4, stale-limited above.
    """

    G_on: float = 1.0
    """Norm of the on-policy surrogate gradient H_on (surrogate units per unit lr);
    also the G_upd of the closed-form rule. Sets the unit of drift speed."""
    lag_sensitivity: float = 30.0
    """L_lag: sensitivity of the surrogate gradient to the behaviour policy (1/units);
    delta_t = L_lag * (theta_t - phi_t). Large enough that stale collapses are
    bias-dominated (ballistic): L_lag * R_batch = 30 >> noise / G_on = 3."""
    sigma_prompt: float = 17.0
    """Norm of the sampling noise of a one-prompt gradient estimate; per step it is
    sigma_prompt / sqrt(batch_prompts) (= 3.0 at B = 32, so cos(on-policy) ~ 0.1)."""
    batch_prompts: int = 32
    """B: prompts per learner step (the noise shrinks as 1/sqrt(B))."""
    R_batch: float = 1.0
    """Per-batch truncation radius: max intra-cycle drift |theta - phi| (units)."""
    R_crit: float = 25.0
    """Surrogate-validity radius: max cumulative drift |theta - theta_0| (units)."""
    dim: int = 32
    """d: dimension of the surrogate space."""
    ballistic_cos: float = 0.5
    """Mean successive-update cosine at or above which a run is called ballistic."""

    def __post_init__(self) -> None:
        positive = {
            k: v
            for k, v in asdict(self).items()
            if k not in ("lag_sensitivity", "ballistic_cos") and not (v > 0)
        }
        if positive:
            raise ValueError(f"StalenessParams: expected positive values, got {positive}")
        if not self.lag_sensitivity >= 0:
            raise ValueError(
                f"StalenessParams.lag_sensitivity: expected >= 0, got {self.lag_sensitivity}"
            )
        if not -1 <= self.ballistic_cos <= 1:
            raise ValueError(
                f"StalenessParams.ballistic_cos: expected in [-1, 1], got {self.ballistic_cos}"
            )

    @property
    def noise_norm(self) -> float:
        """Expected-square norm of the per-step noise, sigma_prompt / sqrt(B)."""
        return self.sigma_prompt / math.sqrt(self.batch_prompts)


@dataclass(frozen=True)
class RunResult:
    """Outcome of one run. ``t_collapse``/``M_collapse`` are None when stable."""

    collapsed: bool
    t_collapse: int | None
    """1-based learner step at which a collapse condition first held (<= T)."""
    M_collapse: int | None
    """Weight syncs pushed up to collapse, the initial one included: ceil(t / S)."""
    regime: str
    """``ballistic``, ``diffusive``, or ``undetermined`` (collapsed at step 1)."""
    cos_sim_mean: float
    """Mean cosine of successive updates u_t, u_{t-1} up to collapse; NaN if one update."""
    failure: str
    """``none``, ``stale_rollout`` or ``horizon``."""
    drift_final: float
    """|theta - theta_0| at the last step simulated (units)."""


def sync_interval(S: int) -> int:
    """Learner steps per weight sync; S = 0 (synchronous) behaves as S = 1."""
    if S < 0:
        raise ValueError(f"staleness S: expected >= 0, got {S}")
    return max(int(S), 1)


def staleness_schedule(S: int, T: int) -> np.ndarray:
    """Staleness (versions) of the rollouts consumed at learner steps 0..T-1: ``t mod S``.

    Shape (T,), int; values in [0, max(S, 1) - 1]. Raises ValueError on S < 0.
    """
    return np.arange(T) % sync_interval(S)


def noise(params: StalenessParams, T: int, seed: int) -> np.ndarray:
    """Sampling noise xi_t of one seed, shape (T, d); E|xi_t|^2 = noise_norm^2."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((T, params.dim)) * (params.noise_norm / math.sqrt(params.dim))


def _check(S, lr, T) -> None:
    if T < 1:
        raise ValueError(f"steps T: expected >= 1, got {T}")
    if np.any(np.asarray(S) < 0):
        raise ValueError(f"staleness S: expected >= 0, got {np.asarray(S).min()}")
    if not np.all(np.asarray(lr) > 0):
        raise ValueError(f"learning rate: expected > 0, got {np.asarray(lr).min()}")


def _result(params, S, t_c, failure, cos_sum, cos_n, drift) -> RunResult:
    cos = cos_sum / cos_n if cos_n else math.nan  # why: one update has no successor
    collapsed = t_c > 0
    regime = (
        "undetermined"
        if not cos_n
        else ("ballistic" if cos >= params.ballistic_cos else "diffusive")
    )
    return RunResult(
        collapsed=bool(collapsed),
        t_collapse=int(t_c) if collapsed else None,
        M_collapse=int(-(-t_c // sync_interval(S))) if collapsed else None,
        regime=regime,
        cos_sim_mean=float(cos),
        failure=_FAILURES[failure],
        drift_final=float(drift),
    )


def simulate(params: StalenessParams, S: int, lr: float, T: int, seed: int) -> RunResult:
    """One run of T learner steps at sync interval S and learning rate lr (PAPERS.md §2).

    The plain-loop reference for :func:`simulate_batch`. Stops at the first collapse.
    Raises ValueError on S < 0, lr <= 0 or T < 1.
    """
    _check(S, lr, T)
    k = sync_interval(S)
    xi = noise(params, T, seed)  # (T, d)
    theta = np.zeros(params.dim)
    phi = theta.copy()
    prev = None
    cos_sum, cos_n, t_c, failure = 0.0, 0, 0, 0
    for t in range(T):
        if t % k == 0:
            phi = theta.copy()  # weight sync: behaviour policy <- learner
        u = params.lag_sensitivity * (theta - phi) + xi[t]  # (d,)
        u[0] += params.G_on  # g_on = G_on * e_0
        if prev is not None:
            cos_sum += (u * prev).sum() / (np.sqrt((u * u).sum()) * np.sqrt((prev * prev).sum()))
            cos_n += 1
        prev = u
        theta = theta + lr * u
        lag = np.sqrt(((theta - phi) ** 2).sum())
        drift = np.sqrt((theta * theta).sum())
        if lag > params.R_batch or drift > params.R_crit:
            t_c, failure = t + 1, (1 if lag > params.R_batch else 2)
            break
    return _result(params, S, t_c, failure, cos_sum, cos_n, np.sqrt((theta * theta).sum()))


def simulate_batch(params: StalenessParams, S, lr, T: int, seeds) -> list[RunResult]:
    """Many runs at once: S, lr, seeds are broadcastable 1-D arrays of the runs (N,).

    Equal to ``[simulate(params, s, l, T, k) for ...]`` (tested); time O(T N d) with
    numpy over runs, stopping when every run has collapsed. Raises as :func:`simulate`.
    """
    S, lr, seeds = np.broadcast_arrays(np.asarray(S), np.asarray(lr, float), np.asarray(seeds))
    _check(S, lr, T)
    k = np.maximum(S, 1)  # (N,) sync interval
    uniq, which = np.unique(seeds, return_inverse=True)
    xi_all = np.stack([noise(params, T, int(s)) for s in uniq])  # (n_seeds, T, d)
    n, d = S.size, params.dim
    theta, phi, prev = np.zeros((n, d)), np.zeros((n, d)), np.zeros((n, d))
    alive = np.ones(n, bool)
    lr_live = lr.copy()  # (N,)
    t_c, failure = np.zeros(n, int), np.zeros(n, int)
    cos_sum, cos_n = np.zeros(n), np.zeros(n, int)
    for t in range(T):
        sync = alive & (t % k == 0)
        phi[sync] = theta[sync]
        u = params.lag_sensitivity * (theta - phi) + xi_all[which, t]  # (N, d)
        u[:, 0] += params.G_on
        if t > 0:  # why: same operation order as simulate, so results match bit for bit
            cos = (u * prev).sum(1) / (np.sqrt((u * u).sum(1)) * np.sqrt((prev * prev).sum(1)))
            cos_sum[alive] += cos[alive]
            cos_n[alive] += 1
        prev = u
        theta = theta + lr_live[:, None] * u  # lr 0 freezes collapsed runs exactly
        lag = np.sqrt(((theta - phi) ** 2).sum(1))
        drift = np.sqrt((theta * theta).sum(1))
        stale, horizon = lag > params.R_batch, drift > params.R_crit
        new = alive & (stale | horizon)
        t_c[new] = t + 1
        failure[new] = np.where(stale[new], 1, 2)
        alive &= ~new
        lr_live[new] = 0.0
        if not alive.any():
            break
    drift = np.sqrt((theta * theta).sum(1))
    return [
        _result(params, int(S[i]), t_c[i], failure[i], cos_sum[i], cos_n[i], drift[i])
        for i in range(n)
    ]


def feedback_factor(params: StalenessParams) -> float:
    """kappa = z / ln(1 + z), z = L_lag * R_batch / G_on (kappa -> 1 as L_lag -> 0).

    Within one sync cycle the lag feeds the bias back into the drift: in the continuum
    limit d lag / d(eta s) = G_on + L_lag * lag, so the cycle's drift reaches R_batch at
    S * eta = ln(1 + z) / L_lag = R_batch / (kappa * G_on). A modelling result, not §2's.
    """
    z = params.lag_sensitivity * params.R_batch / params.G_on
    return 1.0 if z < 1e-12 else z / math.log1p(z)


def safe_span_eta(params: StalenessParams, span):
    """``C_safe(span)`` (surrogate learning-rate units): the stale-rollout rule, written once.

    A learner update that consumes a rollout of staleness ``s`` moves the policy
    ``span = s + 1`` updates away from the rollout's behaviour policy; the run leaves the
    per-step safe region (PAPERS.md §2, ``S eta <~ C_safe``) when ``span * eta >
    C_safe(span)``, with ``C_safe(span) = R_batch / (kappa G_on)`` for ``span >= 2``
    (:func:`feedback_factor`: the lag feeds the bias back within the cycle) and
    ``R_batch / G_on`` for ``span = 1`` (on-policy: no lag to feed back). In the
    sync-interval mode of :func:`simulate` (refresh every ``S`` steps) the largest span is
    ``S``; a pipeline that consumes rollouts up to ``S_max`` versions old has span
    ``S_max + 1``. Broadcasts over ``span`` (values >= 1).
    """
    span = np.asarray(span, float)
    kappa = np.where(span >= 2, feedback_factor(params), 1.0)
    return params.R_batch / (kappa * params.G_on)


def predict_eta_max(params: StalenessParams, S, T):
    """Two-constraint rule (PAPERS.md §2): eta_max = min(C_safe(S) / S, R_crit / (T G_upd)).

    ``S`` is the update span (the sync interval of :func:`simulate`; a pipeline's maximum
    staleness plus one), ``C_safe`` :func:`safe_span_eta` (``R_batch / (kappa G_upd)``,
    kappa = :func:`feedback_factor` the only constant factor, documented in
    docs/staleness.md; 1 at ``S = 1``); G_upd = G_on; S = 0 counts as 1. Broadcasts over
    S and T (arrays or scalars).
    """
    S_eff = np.maximum(np.asarray(S, float), 1.0)
    stale = safe_span_eta(params, S_eff) / S_eff
    horizon = params.R_crit / (np.asarray(T, float) * params.G_on)
    return np.minimum(stale, horizon)
