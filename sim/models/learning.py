"""Learning-progress model: how pass rates move as GRPO trains (docs/learning.md).

One global logit shift ``theta`` (starts at 0) moves every prompt's pass rate:

    p_i(t) = sigmoid(logit p_i0 + theta_t)          0 and 1 stay 0 and 1

and each learner step adds

    d_theta = kappa * (lr / lr_ref) * (1 / B) * sum_{trained groups i} s_i * f_i
    s_i     = (1 / G_i) * sum_j (r_ij - mean_j r_ij)^2
            = unbiased sample variance of the group's rewards * (1 - 1 / G_i)
    f_i     = 1 / (1 + s_stale_i * eta / C_safe)    before the collapse
            = -reversal                             after it

Sources (details and the modelling choices in docs/learning.md):
- ``s_i``: GRPO's group-mean baseline (DeepSeekMath, Shao et al. 2024, §4.1.2): the
  advantage ``r_ij - mean_i`` is zero for a homogeneous group (DAPO, Yu et al. 2025, §3.2
  "dynamic sampling"), and for Bernoulli(p) rewards ``E[s_i] = p (1 - p) (1 - 1/G)``:
  ``p (1 - p) = dp/d(logit p)`` is the policy gradient of the pass rate in this model and
  ``1/G`` is the share the group mean (which includes the sample itself) takes away.
- ``f_i`` and the collapse: the staleness model :mod:`rolloutlab.sim.models.staleness`
  (PAPERS.md §2). ``eta = eta_ref * lr / lr_ref`` is that model's surrogate learning
  rate, ``C_safe = R_batch / (kappa_fb G_on)`` its per-step safe region ``S eta <~ C_safe``.
  The run collapses (and progress reverses from the next step on) at the first step where
  a trained group of staleness ``s`` has ``(s + 1) eta > C_safe(s + 1)`` (stale-rollout
  condition; the lag after the update spans ``s + 1`` updates; the one rule,
  :func:`staleness.safe_span_eta`, which :func:`staleness.predict_eta_max` uses too), or the
  cumulative drift ``sum eta G_on`` exceeds ``R_crit`` (horizon condition).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl
from rolloutlab.sim.models.learning_noise import (
    ADVANTAGES,
    informative_samples,
    noise_multiplier,
    noisy_drive,
    step_signal,
)
from rolloutlab.sim.models.special import expit, logit
from rolloutlab.sim.models.staleness import StalenessParams, feedback_factor, safe_span_eta


@dataclass(frozen=True)
class LearningParams:
    """Constants of the learning-progress model (module docstring; docs/learning.md)."""

    kappa: float
    """Logit gain per unit learning signal at lr == lr_ref (logit units per step)."""
    lr_ref: float = 1e-6
    """Reference learning rate (the learner's units); the gain is linear in lr / lr_ref."""
    eta_ref: float = 0.01
    """Surrogate learning rate of the staleness model at lr == lr_ref (modelling choice:
    the default puts the stale-rollout boundary of the default StalenessParams at
    S ~ 11 versions and the horizon at 2500 steps at lr_ref)."""
    reversal: float = 1.0
    """After a collapse, d_theta = -reversal * (the fresh-data gain): progress reverses."""
    theta_max: float = math.inf
    """Capacity of the shift (logit units): a step's drive ``D`` (the linear d_theta
    above) moves theta to ``theta_max - (theta_max - theta) exp(-D / theta_max)``, so
    ``theta = theta_max (1 - exp(-sum D / theta_max))`` saturates (docs/learning.md §2,
    "saturating shift"). ``inf`` (the default) is the linear model ``theta += D``."""
    b_noise: float = 0.0
    """Gradient-noise scale (informative samples, i.e. responses of non-homogeneous
    groups): a step's drive is ``D X / (1 + b_noise / n)``, ``E X = 1``, ``sd X = sqrt(b_noise / n)``, for
    ``n`` informative samples (:mod:`sim.models.learning_noise`, McCandlish et al. 2018).
    0 (the default, and every block written before the noise term) is the mean-field law."""
    rho: float = 0.0
    """Intra-prompt correlation in [0, 1] of the per-sample gradient: a group of G responses
    counts ``G / (1 + (G - 1) rho)`` samples in the noise term's ``n`` (Kish's design
    effect, :func:`learning_noise.design_effect`). 0 (the default, and every block written
    before this term) counts every response; used only when ``b_noise > 0``."""
    advantage: str = "mean"
    """``mean`` (advantage ``r - rbar``, signal ``s_i``) or ``std`` (GRPO's group-std
    normalised advantage, signal ``sqrt(s_i)``; :func:`learning_noise.step_signal`)."""

    def __post_init__(self) -> None:
        skip = ("kappa", "b_noise", "advantage", "rho")
        bad = {k: v for k, v in asdict(self).items() if k not in skip and not v > 0}
        if not (math.isfinite(self.kappa) and self.kappa >= 0):
            bad["kappa"] = self.kappa
        if not (math.isfinite(self.b_noise) and self.b_noise >= 0):
            bad["b_noise"] = self.b_noise
        if self.advantage not in ADVANTAGES:
            bad["advantage"] = self.advantage
        if not 0 <= self.rho <= 1:
            bad["rho"] = self.rho
        if bad:
            raise ValueError(
                f"LearningParams: expected kappa >= 0, rho in [0, 1] and others > 0, got {bad}"
            )

    def to_dict(self) -> dict:
        """The fields as a strict-JSON dict (``theta_max`` None when infinite), the inverse
        of :meth:`from_dict`."""
        d = asdict(self)
        return d | {"theta_max": d["theta_max"] if math.isfinite(d["theta_max"]) else None}

    @classmethod
    def from_dict(cls, d: dict) -> LearningParams:
        """From a scenario's ``learning`` block; keys other than the fields (provenance,
        fit, ...) are ignored; a block written before the noise term (no ``b_noise``,
        ``advantage``) reads as the mean-field law it was fitted with. Raises ValueError
        naming a missing ``kappa`` or a bad ``advantage``."""
        if "kappa" not in d:
            raise ValueError("learning block: missing field 'kappa'")
        names = set(cls.__dataclass_fields__)
        kw: dict[str, Any] = {
            k: str(v) if k == "advantage" else float(v)
            for k, v in d.items()
            if k in names and v is not None
        }
        return cls(**kw)


def group_signal(rewards) -> float:
    """Learning signal of one group: population variance of its rewards (ddof = 0).

    ``rewards``: (G,) float. Equals the unbiased sample variance times ``1 - 1/G``;
    0 for a homogeneous group and for G = 1. Raises ValueError on an empty group or
    a non-finite reward.
    """
    r = np.asarray(rewards, dtype=float)
    if r.ndim != 1 or r.size == 0:
        raise ValueError(f"rewards: expected a non-empty (G,) array, got shape {r.shape}")
    if not np.all(np.isfinite(r)):
        raise ValueError("rewards: expected finite values")
    return float(np.var(r))


def expected_signal(p, G):
    """E[group_signal] for G Bernoulli(p) rewards: ``p (1 - p) (1 - 1/G)``.

    Broadcasts over ``p`` in [0, 1] and ``G >= 1``. Raises ValueError outside those.
    """
    p, G = np.asarray(p, float), np.asarray(G, float)
    if np.any(~((p >= 0) & (p <= 1))):
        raise ValueError("pass rate: expected values in [0, 1]")
    if np.any(G < 1):
        raise ValueError("group size G: expected >= 1")
    return p * (1 - p) * (1 - 1 / G)


NOISE_STREAM = 0x1EA7
"""Stream key of the noise draws (kept apart from the reward draws' keys)."""


class LearningModel:
    """Global logit shift driven by the trained groups' rewards (module docstring).

    ``staleness`` None uses the default :class:`StalenessParams` (collapse included).
    ``seed`` keys the noise draws (``b_noise > 0``): update ``u`` draws from
    ``default_rng([seed, NOISE_STREAM, u])``, so a run is reproducible and resumable.
    State: ``theta`` (logit shift), ``drift`` (cumulative surrogate drift, units of
    the staleness model), ``t_collapse`` (1-based learner step of the collapse or None),
    ``updates`` (updates applied).
    """

    def __init__(
        self, params: LearningParams, staleness: StalenessParams | None = None, seed: int = 0
    ):
        self.params = params
        self.seed = int(seed)
        self.updates = 0
        self.staleness = staleness if staleness is not None else StalenessParams()
        st = self.staleness
        self.c_safe = st.R_batch / (feedback_factor(st) * st.G_on)
        """Per-step safe region S * eta of the staleness model (surrogate units)."""
        self.theta = 0.0
        self.drift = 0.0
        self.t_collapse: int | None = None

    @property
    def collapsed(self) -> bool:
        """Whether a collapse condition has fired."""
        return self.t_collapse is not None

    def current(self, p0: np.ndarray) -> np.ndarray:
        """Pass rates now, ``sigmoid(logit p0 + theta)``: (n,) -> (n,) in [0, 1].

        Raises ValueError when a value of ``p0`` is outside [0, 1] or NaN.
        """
        p0 = np.asarray(p0, dtype=float)
        if np.any(~((p0 >= 0) & (p0 <= 1))):
            raise ValueError("p0: expected pass rates in [0, 1]")
        with np.errstate(divide="ignore"):
            return expit(logit(p0) + self.theta)  # logit(0) = -inf stays 0, logit(1) = inf

    def eta(self, lr: float) -> float:
        """The staleness model's surrogate learning rate at learner lr ``lr``."""
        return self.params.eta_ref * lr / self.params.lr_ref

    def update(
        self,
        rewards: list[np.ndarray],
        lr: float,
        staleness: np.ndarray | None,
        step: int,
        batch_size: int,
    ) -> float:
        """Apply one learner step; returns d_theta (logit units) and adds it to theta.

        rewards: the trained groups, one (G_i,) float array each (may be empty: no
        update, no drift); lr > 0; staleness: (n_groups,) int >= 0 versions behind, None
        = on-policy; step: 0-based learner step (recorded as ``t_collapse = step + 1``);
        batch_size: B >= 1, the prompts a step trains on (homogeneous groups dilute).
        Raises ValueError on lr <= 0, B < 1, a staleness array of another length or
        with negative values, or a bad group (:func:`group_signal`).
        """
        sig = np.array([group_signal(r) for r in rewards], dtype=float)  # (n,)
        size = np.array([np.size(r) for r in rewards], dtype=float)
        return self.apply_signal(sig, lr, staleness, step, batch_size, size)

    def apply_signal(
        self,
        signal: np.ndarray,
        lr: float,
        staleness: np.ndarray | None,
        step: int,
        batch_size: int,
        samples: np.ndarray | None = None,
    ) -> float:
        """:meth:`update` from per-group reward variances (n,) >= 0 instead of rewards:
        observed :func:`group_signal` values or expectations (:func:`expected_signal`,
        summed), as the mean-field replay of ``calibration.fits.learning_fit`` uses;
        ``samples`` (n,): each group's responses (G_i) for the noise term (required when
        ``b_noise > 0``). Same errors, and ValueError on missing or mis-shaped samples."""
        if not lr > 0:
            raise ValueError(f"lr: expected > 0, got {lr}")
        if batch_size < 1:
            raise ValueError(f"batch_size: expected >= 1, got {batch_size}")
        sig = np.asarray(signal, dtype=float)
        n = sig.size
        if sig.ndim != 1 or np.any(~(sig >= 0)):
            raise ValueError("signal: expected a (n,) array of values >= 0")
        s = np.zeros(n) if staleness is None else np.asarray(staleness, dtype=float)
        if s.shape != (n,) or np.any(s < 0):
            raise ValueError(f"staleness: expected ({n},) values >= 0, got {s!r}")
        if n == 0:
            return 0.0
        noisy = self.params.b_noise > 0
        if noisy and samples is None:
            raise ValueError("samples: required with b_noise > 0 (the noise term counts them)")
        eta = self.eta(lr)
        st = self.staleness
        was_collapsed = self.collapsed
        self.drift += eta * st.G_on
        stale = bool(np.any((s + 1) * eta > safe_span_eta(st, s + 1)))
        if not was_collapsed and (stale or self.drift > st.R_crit):
            self.t_collapse = int(step) + 1
        f = -self.params.reversal * np.ones(n) if was_collapsed else 1 / (1 + s * eta / self.c_safe)
        g = step_signal(sig, self.params.advantage)
        d = self.params.kappa * (lr / self.params.lr_ref) * float((g * f).sum()) / batch_size
        if noisy:  # the mean-field law is the b_noise = 0 limit: its arithmetic is untouched
            rng = np.random.default_rng([self.seed, NOISE_STREAM, self.updates])
            n_inf = informative_samples(sig, samples, self.params.rho)
            x = noise_multiplier(rng, n_inf, self.params.b_noise)
            d = float(noisy_drive(d, n_inf, self.params.b_noise, x))
        self.updates += 1
        if math.isfinite(self.params.theta_max):  # the linear model's arithmetic stays as it was
            d = float(saturating_shift(self.theta, d, self.params.theta_max)) - self.theta
        self.theta += d
        return d

    def state_dict(self) -> dict:
        """JSON-serialisable state: theta, drift, t_collapse, updates."""
        return {"theta": self.theta, "drift": self.drift, "t_collapse": self.t_collapse,
                "updates": self.updates}  # fmt: skip

    def load_state_dict(self, d: dict) -> None:
        """Restore :meth:`state_dict`. Raises ValueError naming a missing key."""
        for key in ("theta", "drift", "t_collapse"):
            if key not in d:
                raise ValueError(f"learning state: missing key {key!r}")
        self.theta, self.drift = float(d["theta"]), float(d["drift"])
        self.t_collapse = None if d["t_collapse"] is None else int(d["t_collapse"])
        self.updates = int(d.get("updates", 0))  # states saved before the noise term: 0


def saturating_shift(theta, drive, theta_max: float):
    """theta after a step of drive ``D`` (the linear model's d_theta, logit units):
    ``theta + D`` when ``theta_max`` is inf, else ``theta_max - (theta_max - theta)
    exp(-D / theta_max)``, the exact step of ``dtheta = dD (1 - theta / theta_max)``
    (**modelling choice**, docs/learning.md §2). Broadcasts over arrays ``theta``,
    ``drive``."""
    if not math.isfinite(theta_max):
        return theta + drive
    return theta + (theta_max - theta) * -np.expm1(-np.asarray(drive, float) / theta_max)


def _reward_column(steps: pl.DataFrame) -> pl.DataFrame:
    for col in ("t_end", "reward_mean"):
        if col not in steps.columns:
            raise ValueError(f"steps table: missing column {col!r}")
    return steps.sort("t_end")


def time_to_target(steps: pl.DataFrame, target: float, window: int = 10) -> float | None:
    """First ``t_end`` (s) at which the trailing mean of ``reward_mean`` over ``window``
    steps (full windows only, rows ordered by t_end) is >= ``target``; None if never.

    A window holding a null reward_mean has a null mean (never reaches the target).
    Raises ValueError on a missing column or window < 1.
    """
    if window < 1:
        raise ValueError(f"window: expected >= 1, got {window}")
    df = _reward_column(steps).with_columns(
        pl.col("reward_mean").rolling_mean(window, min_samples=window).alias("_trail")
    )
    hit = df.filter(pl.col("_trail") >= target)
    return None if hit.is_empty() else float(hit["t_end"][0])


def final_reward(steps: pl.DataFrame, frac: float = 0.1) -> float:
    """Mean ``reward_mean`` over the last ``ceil(frac * n)`` steps (ordered by t_end).

    Nulls are skipped (NaN when all are null). Raises ValueError on an empty table,
    a missing column, or frac outside (0, 1].
    """
    if not 0 < frac <= 1:
        raise ValueError(f"frac: expected in (0, 1], got {frac}")
    df = _reward_column(steps)
    if df.is_empty():
        raise ValueError("steps table: no rows")
    tail = df.tail(math.ceil(frac * df.height))["reward_mean"].drop_nulls()
    return float(tail.mean()) if len(tail) else math.nan
