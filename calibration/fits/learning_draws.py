"""Runs drawn from the fitted learning model, many at once: the distribution of a
statistic of a noisy run (e.g. the first step whose trailing mean reward reaches a
target), not the statistic of the mean curve (``rolloutlab compare learning``,
docs/real_task.md).

Each draw is :func:`calibration.fits.learning_fit.simulate_counts` (fresh prompts, binomial
counts, the model updated with the drawn groups' signals), vectorised over draws: per
step the drive ``kappa (lr / lr_ref) sum_i g_i / n`` (``g_i`` = ``s_i = k_i/G (1 - k_i/G)``,
or ``sqrt(s_i)`` for the std advantage; n = B, or the informative count with dynamic
sampling), with the noise term of :mod:`sim.models.learning_noise` when ``b_noise > 0`` (its ``n``
the effective samples of the informative groups, design effect ``rho``), moves every draw's theta through
:func:`sim.models.learning.saturating_shift`. On-policy only (staleness 0, the synchronous runs
this compares), and refused where :class:`sim.models.learning.LearningModel` would collapse
within the run (the reversal is not drawn).
"""

from __future__ import annotations

import numpy as np
from rolloutlab.calibration.fits.beta_grid import beta_logit_grid
from rolloutlab.sim.models.learning import LearningModel, LearningParams, saturating_shift
from rolloutlab.sim.models.learning_noise import (
    effective_samples,
    noise_multiplier,
    noisy_drive,
    step_signal,
)
from scipy import special


def draw_rewards(
    params: LearningParams,
    a: float,
    b: float,
    G: np.ndarray,
    lr: np.ndarray,
    B: np.ndarray,
    dynamic_sampling: bool,
    draws: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """(draws, T) mean reward per step of ``draws`` runs at per-step G, lr, B (T,) each,
    p0 ~ Beta(a, b): the first array of :func:`draw_paths`. Raises ValueError when the
    model collapses within T steps at these lr (horizon or on-policy boundary of
    :class:`LearningModel`)."""
    return draw_paths(params, a, b, G, lr, B, dynamic_sampling, draws, rng)[0]


def population_pass_rate(a: float, b: float, theta: np.ndarray) -> np.ndarray:
    """Mean pass rate over the prompt population, ``E_{p0 ~ Beta(a, b)} sigmoid(logit p0 +
    theta)``, of every shift in ``theta`` (any shape; same shape out): what a held-out
    evaluation with one sampled answer per problem estimates (``eval.jsonl`` ``accuracy``,
    real/tasks/evaluate.py). Quadrature of :func:`calibration.fits.beta_grid.beta_logit_grid`."""
    u, w = beta_logit_grid(a, b)
    th = np.asarray(theta, float)
    return (special.expit(th[..., None] + u) * w).sum(axis=-1)


def draw_paths(
    params: LearningParams,
    a: float,
    b: float,
    G: np.ndarray,
    lr: np.ndarray,
    B: np.ndarray,
    dynamic_sampling: bool,
    draws: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """``(reward, theta)``, (draws, T) each, of ``draws`` runs at per-step G, lr, B (T,)
    each, p0 ~ Beta(a, b): ``reward[:, t]`` the mean reward of step t's rollouts,
    ``theta[:, t]`` the shift (logit units) after step t's update, i.e. of the policy a
    held-out evaluation logged at step t sees (:func:`population_pass_rate` turns it into
    that evaluation's expected accuracy). Raises ValueError when the model collapses
    within T steps at these lr (horizon or on-policy boundary of :class:`LearningModel`)."""
    probe = LearningModel(params)  # collapse depends on lr and steps only, not the signal
    for t, v in enumerate(lr):
        probe.apply_signal(np.zeros(1), float(v), None, t, 1, np.ones(1))
    if probe.collapsed:
        raise ValueError(f"the learning model collapses at step {probe.t_collapse}: not drawn")
    T = len(G)
    theta = np.zeros(draws)
    out = np.empty((draws, T))
    shifts = np.empty((draws, T))
    gain = params.kappa * np.asarray(lr, float) / params.lr_ref
    for t in range(T):
        g, n = int(G[t]), int(B[t])
        lp0 = special.logit(rng.beta(a, b, (draws, n)))
        k = rng.binomial(g, special.expit(lp0 + theta[:, None]))  # (draws, n)
        out[:, t] = k.sum(axis=1) / (n * g)
        var = (k / g) * (1 - k / g)
        kept = np.maximum((var > 0).sum(axis=1), 1) if dynamic_sampling else n
        drive = gain[t] * step_signal(var, params.advantage).sum(axis=1) / kept
        if params.b_noise > 0:  # noise term (sim.models.learning_noise), one draw each
            n_inf = effective_samples((var > 0).sum(axis=1), g, params.rho)
            drive = noisy_drive(
                drive, n_inf, params.b_noise, noise_multiplier(rng, n_inf, params.b_noise)
            )
        theta = saturating_shift(theta, drive, params.theta_max)
        shifts[:, t] = theta
    return out, shifts
