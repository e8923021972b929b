"""Fit the learning-progress model (:mod:`sim.learning`) to a real run (docs/learning.md).

1. Read the run (:func:`calibration.run_curve.read_run`): per step G, lr, and the number
   of correct responses of every group.
2. Replay the run's own groups through the model: a :class:`LearningModel` with
   ``kappa = 1`` and ``lr_ref`` = the run's median lr is updated with each step's
   trained groups (the informative ones, over their count, when the run used dynamic
   sampling: the real learner averages its loss over the kept groups; else all B groups
   over B). Its theta before step t is ``C_t``, so with gain kappa ``theta_t = kappa C_t``
   exactly (the update is linear in kappa).
3. Prompts are fresh every step with ``p0 ~ Beta(a, b)``; a group's count is
   ``k ~ Binomial(G, sigmoid(logit p0 + kappa C_t))``. (a, b, kappa) maximise the
   likelihood of every group's count (expectation over Beta on a grid in logit p0, :func:`beta_logit_grid`),
   started from the beta-binomial fit of the first ``init_steps`` steps; SEs from the
   observed information (delta method from log space).
4. Fit quality: RMSE and R^2 (against the constant mean) of the per-step accuracy, for
   the replayed curve and for the closed-loop mean-field curve (the model run on its
   own expected signals, as the simulator runs it).
"""

from __future__ import annotations

import numpy as np
from rolloutlab.calibration.beta_grid import beta_logit_grid
from rolloutlab.calibration.passrate_fit import fit_beta_binomial, observed_covariance
from rolloutlab.calibration.reward_curve_fit import expected_curve, quality
from rolloutlab.calibration.run_curve import RunCurve
from rolloutlab.sim.learning import LearningModel, LearningParams
from scipy import optimize, special


def _groups(counts: np.ndarray, G: int) -> list[np.ndarray]:
    return [np.r_[np.ones(k), np.zeros(G - k)] for k in counts]


def _trained(counts: np.ndarray, G: int, dynamic_sampling: bool) -> tuple[list, int]:
    groups = _groups(counts, G)
    if dynamic_sampling:
        groups = [g for g in groups if 0 < g.sum() < G]
        return groups, max(len(groups), 1)
    return groups, len(groups)


def replay_shift(curve: RunCurve, lr_ref: float) -> np.ndarray:
    """C_t (T,): theta before each step of a kappa = 1 model replaying the run's groups."""
    model = LearningModel(LearningParams(kappa=1.0, lr_ref=lr_ref))
    C = np.empty(len(curve.G))
    for t, (G, lr, c) in enumerate(zip(curve.G, curve.lr, curve.counts, strict=True)):
        C[t] = model.theta
        groups, batch = _trained(c, int(G), curve.dynamic_sampling)
        model.update(groups, float(lr), None, t, batch)
    return C


def _pmf(G: int, p: np.ndarray) -> np.ndarray:
    """Binomial pmf (..., G + 1) of 0..G successes at probabilities p (...)."""
    j = np.arange(G + 1)
    p = p[..., None]
    return special.comb(G, j) * p**j * (1 - p) ** (G - j)


def _nll(x: np.ndarray, curve: RunCurve, C: np.ndarray, hist: dict) -> float:
    """Negative log likelihood of every group's count at (log a, log b, log kappa)."""
    a, b, kappa = np.exp(x)
    lp0, w = beta_logit_grid(a, b)
    nll = 0.0
    for G, (rows, h) in hist.items():
        p = special.expit(lp0[None, :] + kappa * C[rows, None])  # (T_G, Q)
        pk = np.einsum("tqj,q->tj", _pmf(G, p), w)  # (T_G, G + 1)
        nll -= float((h * np.log(np.maximum(pk, 1e-300))).sum())
    return nll


def mean_field_curve(kappa: float, a: float, b: float, curve: RunCurve, lr_ref: float):
    """Closed-loop prediction (T,) of the mean pass rate: the model driven by its own
    expected signal ``E[p (1 - p)] (1 - 1/G)`` per trained group (over the B groups, or over
    the expected kept ones ``max(B E[1 - p^G - (1 - p)^G], 1)`` with dynamic sampling),
    p0 ~ Beta(a, b): :func:`calibration.reward_curve_fit.expected_curve` at the run's G, lr, B."""
    B = np.array([c.size for c in curve.counts])
    return expected_curve(a, b, kappa, curve.lr, curve.G, lr_ref, curve.dynamic_sampling, B)


def _quality(pred: np.ndarray, obs: np.ndarray) -> dict:
    return quality(pred, obs) | {"predicted_last10": float(pred[-10:].mean())}


def fit_learning(curve: RunCurve, init_steps: int = 3) -> dict:
    """Fit kappa with the initial Beta(a, b) (module docstring). Returns the ``learning``
    block without provenance: the LearningParams fields (``lr_ref`` = the run's median
    lr) plus ``fit``. Raises ValueError when the run has fewer than ``init_steps + 2``
    steps, or its first steps are all right or all wrong."""
    T = len(curve.G)
    if init_steps < 1 or T < init_steps + 2:
        raise ValueError(f"run has {T} steps; need at least init_steps + 2 = {init_steps + 2}")
    first = list(zip(curve.counts[:init_steps], curve.G[:init_steps], strict=True))
    init = fit_beta_binomial(
        np.concatenate([c for c, _ in first]),
        np.concatenate([np.full(c.size, g) for c, g in first]),
    )
    lr_ref = float(np.median(curve.lr))
    C = replay_shift(curve, lr_ref)
    hist = {}
    for G in np.unique(curve.G):
        rows = np.flatnonzero(curve.G == G)
        hist[int(G)] = (
            rows,
            np.stack([np.bincount(curve.counts[t], minlength=G + 1) for t in rows]),
        )

    def f(x):
        return _nll(np.asarray(x, float), curve, C, hist)

    best = min(
        (
            optimize.minimize(f, np.log([init["alpha"], init["beta"], k0]), method="L-BFGS-B")
            for k0 in (1.0,)
        ),
        key=lambda r: r.fun,
    )
    a, b, kappa = (float(v) for v in np.exp(best.x))
    se = np.exp(best.x) * np.sqrt(np.clip(np.diag(observed_covariance(f, best.x)), 0, None))
    obs = curve.accuracy
    u, w = beta_logit_grid(a, b)
    p_t = special.expit(u[None, :] + kappa * C[:, None])  # (T, Q)
    replayed, m2 = p_t @ w, p_t**2 @ w
    B_t = np.array([c.size for c in curve.counts])
    # sampling noise of one step's accuracy: fresh prompts (Var p / B) + Bernoulli draws
    noise_var = (m2 - replayed**2) / B_t + (replayed - m2) / (B_t * curve.G)
    blocks = np.array_split(np.arange(T), max(T // 10, 1))
    return {
        **LearningParams(kappa=kappa, lr_ref=lr_ref).__dict__,
        "fit": {
            "method": "MLE of (a, b, kappa) on every group's count; theta = kappa * replayed signal",
            "loglik": -float(best.fun),
            "converged": bool(best.success),
            "se": {"kappa": float(se[2]), "init_alpha": float(se[0]), "init_beta": float(se[1])},
            "init_pass_rate": {"spec": f"beta:{a:.4g},{b:.4g}", "mean": a / (a + b)},
            "init_pass_rate_first_steps": {
                "spec": f"beta:{init['alpha']:.4g},{init['beta']:.4g}",
                "mean": init["mean"],
            },
            "steps": T,
            "init_steps": init_steps,
            "dynamic_sampling": curve.dynamic_sampling,
            "theta_final": float(kappa * C[-1]),
            "accuracy_first": float(obs[:init_steps].mean()),
            "accuracy_last10": float(obs[-10:].mean()),
            "sampling_noise_rmse": float(np.sqrt(noise_var.mean())),
            "accuracy_blocks_of_10": [round(float(obs[i].mean()), 3) for i in blocks],
            "replayed_blocks_of_10": [round(float(replayed[i].mean()), 3) for i in blocks],
            "replayed": _quality(replayed, obs),
            "closed_loop": _quality(mean_field_curve(kappa, a, b, curve, lr_ref), obs),
        },
    }


def simulate_curve(
    kappa: float,
    a: float,
    b: float,
    G: int,
    B: int,
    T: int,
    lr: float,
    seed: int,
    dynamic_sampling: bool = False,
) -> RunCurve:
    """A synthetic run drawn from the model itself (recovery tests): each step B fresh
    prompts with p0 ~ Beta(a, b), counts ~ Binomial(G, sigmoid(logit p0 + theta)), then
    :meth:`LearningModel.update` on the trained groups, lr_ref = lr."""
    rng = np.random.default_rng(seed)
    model = LearningModel(LearningParams(kappa=kappa, lr_ref=lr))
    counts = []
    for t in range(T):
        k = rng.binomial(G, model.current(rng.beta(a, b, B)))
        counts.append(k)
        groups, batch = _trained(k, G, dynamic_sampling)
        model.update(groups, lr, None, t, batch)
    return RunCurve(np.full(T, G), np.full(T, lr), counts, dynamic_sampling)
