"""Fit the learning-progress model (:mod:`sim.models.learning`) to a real run (docs/learning.md).

1. Read the run (:func:`calibration.readers.run_curve.read_run`): per step G, lr, and the number
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
   ``model="saturating"`` adds the shift's capacity ``theta_max``
   (:attr:`LearningParams.theta_max`): ``theta_t = theta_max (1 - exp(-kappa C_t /
   theta_max))``, exact for the saturating update; the linear model is its
   ``theta_max -> inf`` limit, so twice the log-likelihood gain is a likelihood-ratio
   statistic (chi^2 with 1 degree of freedom under the linear model; Wilks 1938).
4. Fit quality: RMSE and R^2 (against the constant mean) of the per-step accuracy, for
   the replayed curve and for the closed-loop mean-field curve (the model run on its
   own expected signals, as the simulator runs it).
"""

from __future__ import annotations

import math

import numpy as np
from rolloutlab.calibration.fits.beta_grid import beta_logit_grid
from rolloutlab.calibration.fits.passrate_fit import fit_beta_binomial, observed_covariance
from rolloutlab.calibration.fits.reward_curve_fit import expected_curve, quality
from rolloutlab.calibration.readers.run_curve import RunCurve
from rolloutlab.sim.models.learning import LearningModel, LearningParams, saturating_shift
from scipy import optimize, special, stats

MODELS = ("linear", "saturating")
"""Shapes of the shift (module docstring): theta linear in the cumulative signal, or
saturating at a fitted capacity."""


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


def mixed_count_pmf(G: int, p: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Pmf (..., G + 1) of a group's count of correct responses, 0..G, when its pass rate
    is ``p[..., q]`` with weight ``w[q]``: ``sum_q w_q C(G, j) p^j (1 - p)^(G - j)``, the
    binomial pmf mixed over quadrature nodes (:func:`beta_logit_grid`). p (..., Q) in
    [0, 1], w (Q,).

    The powers are running products, one (..., Q) multiply per power, and the sum over q is
    one matrix-vector product: ``np.power`` per element, or ``exp`` of the log pmf
    (gammaln), cost 5-15x more here, and this is most of a learning fit's time."""
    q = 1.0 - p
    terms = np.empty((G + 1, *p.shape))  # (G + 1, ..., Q): terms[i] = (1 - p)^i ...
    terms[0] = 1.0
    for i in range(1, G + 1):
        np.multiply(terms[i - 1], q, out=terms[i])
    p_pow = p.copy()
    for i in range(G - 1, -1, -1):  # ... times p^(G - i): the pmf term of G - i successes
        terms[i] *= p_pow
        if i:
            p_pow *= p
    mixed = (terms @ w)[::-1]  # (G + 1, ...) by successes 0..G
    return np.moveaxis(mixed, 0, -1) * special.comb(G, np.arange(G + 1))


def shift(C: np.ndarray, kappa: float, theta_max: float = math.inf) -> np.ndarray:
    """theta (T,) of a model with gain ``kappa`` and capacity ``theta_max`` whose
    kappa = 1 replay is ``C`` (T,): ``kappa C``, or ``theta_max (1 - exp(-kappa C /
    theta_max))`` (the saturating update composed over steps; no collapse)."""
    return saturating_shift(np.zeros_like(C), kappa * C, theta_max)


def _hist(curve: RunCurve, C: np.ndarray) -> list[tuple]:
    """Per group size G of the run: ``(C at its steps, G, counts histogram (T_G, G + 1))``."""
    out = []
    for G in np.unique(curve.G):
        rows = np.flatnonzero(curve.G == G)
        h = np.stack([np.bincount(curve.counts[t], minlength=G + 1) for t in rows])
        out.append((C[rows], int(G), h))
    return out


def _nll(x: np.ndarray, hist: list[tuple]) -> float:
    """Negative log likelihood of every group's count at (log a, log b, log kappa[, log
    theta_max]); ``hist`` from :func:`_hist` (of one or several runs)."""
    a, b, kappa = np.exp(x[:3])
    cap = math.exp(x[3]) if len(x) > 3 else math.inf
    lp0, w = beta_logit_grid(a, b)
    nll = 0.0
    for C, G, h in hist:
        p = special.expit(lp0[None, :] + shift(C, kappa, cap)[:, None])  # (T_G, Q)
        pk = mixed_count_pmf(G, p, w)  # (T_G, G + 1)
        nll -= float((h * np.log(np.maximum(pk, 1e-300))).sum())
    return nll


def mean_field_curve(
    kappa: float,
    a: float,
    b: float,
    curve: RunCurve,
    lr_ref: float,
    theta_max: float = math.inf,
    b_noise: float = 0.0,
    advantage: str = "mean",
    rho: float = 0.0,
):
    """Closed-loop prediction (T,) of the mean pass rate: the model driven by its own
    expected signal ``E[p (1 - p)] (1 - 1/G)`` per trained group (over the B groups, or over
    the expected kept ones ``max(B E[1 - p^G - (1 - p)^G], 1)`` with dynamic sampling),
    p0 ~ Beta(a, b): :func:`calibration.fits.reward_curve_fit.expected_curve` at the run's G, lr, B
    (with the noise law's expected share when ``b_noise > 0``, design effect ``rho``)."""
    B = np.array([c.size for c in curve.counts])
    return expected_curve(
        a, b, kappa, curve.lr, curve.G, lr_ref, curve.dynamic_sampling, B, theta_max,
        b_noise, advantage, rho,
    )  # fmt: skip


def _quality(pred: np.ndarray, obs: np.ndarray) -> dict:
    return quality(pred, obs) | {"predicted_last10": float(pred[-10:].mean())}


def _minimize(f, x0: list[float]):
    return optimize.minimize(f, np.asarray(x0, float), method="L-BFGS-B")


def fit_learning(
    curve: RunCurve | list[RunCurve], init_steps: int = 3, model: str = "linear"
) -> dict:
    """Fit kappa with the initial Beta(a, b), and with ``model="saturating"`` the capacity
    theta_max (module docstring). Several runs (e.g. seeds of one setting) are fitted
    jointly: one likelihood, each run replayed on its own; the fit-quality numbers are the
    first run's. Returns the ``learning`` block without provenance: the
    LearningParams fields (``lr_ref`` = the run's median lr; ``theta_max`` None for the
    linear model) plus ``fit``. Raises ValueError on an unknown model, when the run has
    fewer than ``init_steps + 2`` steps, or its first steps are all right or all wrong."""
    if model not in MODELS:
        raise ValueError(f"learning model: expected one of {MODELS}, got {model!r}")
    curves = [curve] if isinstance(curve, RunCurve) else list(curve)
    curve = curves[0]
    T = len(curve.G)
    if init_steps < 1 or min(len(c.G) for c in curves) < init_steps + 2:
        raise ValueError(f"run has {T} steps; need at least init_steps + 2 = {init_steps + 2}")
    first = [
        (k, g) for c in curves for k, g in zip(c.counts[:init_steps], c.G[:init_steps], strict=True)
    ]
    init = fit_beta_binomial(
        np.concatenate([c for c, _ in first]),
        np.concatenate([np.full(c.size, g) for c, g in first]),
    )
    lr_ref = float(np.median(np.concatenate([c.lr for c in curves])))
    C = replay_shift(curve, lr_ref)
    hist = [h for c in curves for h in _hist(c, replay_shift(c, lr_ref))]

    def f(x):
        return _nll(np.asarray(x, float), hist)

    linear = _minimize(f, list(np.log([init["alpha"], init["beta"], 1.0])))
    best, lr_test = linear, None
    if model == "saturating":  # started from the linear optimum, capacity 1x and 3x its reach
        reach = max(float(np.exp(linear.x[2]) * C[-1]), 0.1)
        best = min(
            (_minimize(f, [*linear.x[:2], linear.x[2] + 1, math.log(m * reach)]) for m in (1, 3)),
            key=lambda r: r.fun,
        )
        stat = max(2 * float(linear.fun - best.fun), 0.0)
        lr_test = {"loglik_linear": -float(linear.fun), "statistic": stat,
                   "p_value": float(stats.chi2.sf(stat, 1))}  # fmt: skip
    a, b, kappa = (float(v) for v in np.exp(best.x[:3]))
    theta_max = float(np.exp(best.x[3])) if model == "saturating" else math.inf
    se = np.exp(best.x) * np.sqrt(np.clip(np.diag(observed_covariance(f, best.x)), 0, None))
    theta = shift(C, kappa, theta_max)
    obs = curve.accuracy
    u, w = beta_logit_grid(a, b)
    p_t = special.expit(u[None, :] + theta[:, None])  # (T, Q)
    replayed, m2 = p_t @ w, p_t**2 @ w
    B_t = np.array([c.size for c in curve.counts])
    # sampling noise of one step's accuracy: fresh prompts (Var p / B) + Bernoulli draws
    noise_var = (m2 - replayed**2) / B_t + (replayed - m2) / (B_t * curve.G)
    blocks = np.array_split(np.arange(T), max(T // 10, 1))
    params = LearningParams(kappa=kappa, lr_ref=lr_ref, theta_max=theta_max).to_dict()
    ses = {"kappa": float(se[2]), "init_alpha": float(se[0]), "init_beta": float(se[1])}
    return {
        **params,
        "fit": {
            "model": model,
            "method": f"MLE of (a, b, kappa{', theta_max' if len(best.x) > 3 else ''}) on every "
            "group's count; theta = shift of the replayed signal",
            "loglik": -float(best.fun),
            "likelihood_ratio_vs_linear": lr_test,
            "converged": bool(best.success),
            "se": ses | ({"theta_max": float(se[3])} if len(best.x) > 3 else {}),
            "init_pass_rate": {"spec": f"beta:{a:.4g},{b:.4g}", "mean": a / (a + b)},
            "init_pass_rate_first_steps": {
                "spec": f"beta:{init['alpha']:.4g},{init['beta']:.4g}",
                "mean": init["mean"],
            },
            "steps": T,
            "runs": len(curves),
            "init_steps": init_steps,
            "dynamic_sampling": curve.dynamic_sampling,
            "theta_final": float(theta[-1]),
            "accuracy_first": float(obs[:init_steps].mean()),
            "accuracy_last10": float(obs[-10:].mean()),
            "sampling_noise_rmse": float(np.sqrt(noise_var.mean())),
            "accuracy_blocks_of_10": [round(float(obs[i].mean()), 3) for i in blocks],
            "replayed_blocks_of_10": [round(float(replayed[i].mean()), 3) for i in blocks],
            "replayed": _quality(replayed, obs),
            "closed_loop": _quality(mean_field_curve(kappa, a, b, curve, lr_ref, theta_max), obs),
        },
    }


def simulate_counts(
    params: LearningParams,
    a: float,
    b: float,
    G: np.ndarray,
    lr: np.ndarray,
    B: np.ndarray,
    dynamic_sampling: bool,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """One run drawn from the model (per step t: B[t] fresh prompts with p0 ~ Beta(a, b),
    counts ~ Binomial(G[t], sigmoid(logit p0 + theta)), then
    :meth:`LearningModel.apply_signal` on the trained groups' signals ``k/G (1 - k/G)`` =
    :func:`sim.models.learning.group_signal` of k ones; with ``dynamic_sampling`` only the
    informative groups, over their count). G, lr, B: (T,). Returns the (B[t],) counts."""
    model = LearningModel(params, seed=int(rng.integers(2**31)) if params.b_noise > 0 else 0)
    counts = []
    for t in range(len(G)):
        k = rng.binomial(int(G[t]), model.current(rng.beta(a, b, int(B[t]))))
        counts.append(k)
        sig = (k / G[t]) * (1 - k / G[t])
        if dynamic_sampling:
            sig = sig[sig > 0]
        model.apply_signal(sig, float(lr[t]), None, t, max(sig.size, 1), np.full(sig.size, G[t]))
    return counts


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
    theta_max: float = math.inf,
) -> RunCurve:
    """A synthetic run drawn from the model itself (recovery tests): :func:`simulate_counts`
    at constant G, B, lr with lr_ref = lr."""
    rng = np.random.default_rng(seed)
    params = LearningParams(kappa=kappa, lr_ref=lr, theta_max=theta_max)
    Gs, lrs = np.full(T, G), np.full(T, lr)
    counts = simulate_counts(params, a, b, Gs, lrs, np.full(T, B), dynamic_sampling, rng)
    return RunCurve(Gs, lrs, counts, dynamic_sampling)
