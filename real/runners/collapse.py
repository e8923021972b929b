"""Collapse detection for real GRPO runs: documented criteria, checked once per learner step.

docs/DESIGN.md: ``t_collapse`` is the first learner step (1-based, as in :mod:`sim.models.staleness`)
at which one of these criteria holds (checked in this order; the first that holds names
the failure):

1. ``nan``: the step's reward mean, loss, gradient norm or KL is NaN or infinite.
2. ``kl``: the token-mean k3 KL of the policy to the warm-start reference exceeds
   :attr:`CollapseConfig.kl_max` (nats/token).
3. ``ratio``: the token-mean ``|log rho|`` of the importance ratio of the consumed
   rollouts (learner vs behaviour log-probs, before the step's update) exceeds
   :attr:`CollapseConfig.log_ratio_max`: the behaviour policy and the learner disagree.
4. ``reward``: the reward, smoothed by an exponential moving average, has stayed below
   ``reward_frac`` times its running best for ``patience`` consecutive steps (only once
   the running best exceeds ``min_best``, so a run that never learned is not "collapsed").
5. ``heldout`` (a whole run's judgement, :func:`judge_run`): the last held-out accuracy is
   below ``reward_frac`` times the best one of the run (armed above ``min_best``), e.g. a
   run whose policy stopped producing correct answers before the reward criterion's
   patience ran out.

Hysteresis: the KL, ratio and entropy criteria follow a Schmitt trigger. A
signal *enters* its excursion at the first step beyond its bound and *leaves* it only
when it falls back past ``release`` times the bound (``release = 1``: no hysteresis); the
criterion fires once the excursion has lasted ``kl_patience`` steps with an update. So a
one-step spike that drops back below the release level never fires, while a signal that
dithers around its bound keeps counting. ``onset`` records the excursion's first step.

6. ``entropy`` (only when the step reports one and ``entropy_frac > 0``): the token-mean
   policy entropy below ``entropy_frac`` times the mean of the first ``patience`` entropies
   seen (entropy collapse, tinker-cookbook PR #822), with the same hysteresis.

The KL criterion fires at the first step above the bound by default
(``kl_patience = 1``, what the live detector of the asynchronous runs and the stability
grids use); :func:`judge_run` asks for ``patience`` consecutive steps, because the k3
estimate of one step can spike on a healthy run (4.5 nats at one step of a static:4
digit-chain run with reward 0.81, 0.35 eight steps later).

Criteria 2-3 are "KL or importance ratio beyond a bound"; 4 is "reward
below a fraction of its running best for k steps". The defaults were set from the lr
scan in docs/real_async.md (stable runs stay far below them).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

FAILURES = ("none", "nan", "kl", "ratio", "reward", "heldout", "entropy")


@dataclass(frozen=True)
class CollapseConfig:
    """Thresholds of the collapse criteria (module docstring)."""

    reward_frac: float = 0.5
    """Reward criterion: smoothed reward below this fraction of its running best..."""
    patience: int = 5
    """...for this many consecutive steps (k)."""
    reward_ema: float = 0.3
    """Weight of the newest step in the reward's moving average (1: no smoothing)."""
    min_best: float = 0.1
    """The reward criterion is armed only once the smoothed reward's best exceeds this."""
    kl_max: float = 2.0
    """KL criterion: token-mean k3 KL to the reference above this (nats/token)."""
    log_ratio_max: float = 1.0
    """Ratio criterion: token-mean ``|log rho|`` of the consumed rollouts above this."""
    kl_patience: int = 1
    """KL criterion: ...for this many consecutive steps with an update (1: at once)."""
    release: float = 1.0
    """Hysteresis: an excursion of KL / ratio / entropy ends only when the signal is back
    past ``release`` times its bound (in (0, 1]; 1: no hysteresis)."""
    entropy_frac: float = 0.0
    """Entropy criterion: entropy below this fraction of its early mean (0: off; < 1)."""

    def __post_init__(self) -> None:
        for name in (
            "reward_frac",
            "reward_ema",
            "min_best",
            "kl_max",
            "log_ratio_max",
            "release",
            "entropy_frac",
        ):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"CollapseConfig: {name} must be a finite number >= 0, got {v}")
        if not (0 < self.release <= 1 and self.entropy_frac < 1):
            raise ValueError(
                f"CollapseConfig: need 0 < release <= 1 and entropy_frac < 1, got {self}"
            )
        if not (0 < self.reward_frac < 1 and 0 < self.reward_ema <= 1):
            raise ValueError(
                f"CollapseConfig: need 0 < reward_frac < 1 and 0 < reward_ema <= 1, got {self}"
            )
        if (
            self.patience < 1
            or self.kl_patience < 1
            or not (self.kl_max > 0 and self.log_ratio_max > 0)
        ):
            raise ValueError(f"CollapseConfig: need patience >= 1 and positive bounds, got {self}")


class CollapseDetector:
    """Feeds on one step's statistics at a time; remembers the first criterion that fired.

    Life cycle: :meth:`observe` once per learner step in order; ``t_collapse`` (1-based)
    and ``failure`` are set the first time a criterion holds and never change after;
    :meth:`state_dict` / :meth:`load_state_dict` carry it through checkpoints.
    """

    def __init__(self, cfg: CollapseConfig):
        self.cfg = cfg
        self.ema: float | None = None
        self.best = -math.inf
        self.below = 0
        self.kl_above = 0
        self.ratio_above = 0
        self.ent_below = 0
        self.ent_early: list[float] = []
        self.t_collapse: int | None = None
        self.onset: int | None = None
        """1-based first step of the excursion that fired (= ``t_collapse`` without patience)."""
        self.failure = "none"

    @property
    def collapsed(self) -> bool:
        """Whether a criterion has fired."""
        return self.t_collapse is not None

    def observe(
        self,
        step: int,
        reward: float,
        kl: float | None = None,
        log_ratio: float | None = None,
        loss: float | None = None,
        grad_norm: float | None = None,
        entropy: float | None = None,
    ) -> str | None:
        """Check step ``step`` (0-based); returns the failure name if it fires now, else None.

        ``kl``, ``log_ratio``, ``loss``, ``grad_norm``, ``entropy`` are None for a step
        without an update.
        """
        fired = self._criterion(reward, kl, log_ratio, loss, grad_norm, entropy)
        if fired and not self.collapsed:
            self.t_collapse, self.failure = step + 1, fired
            run = {"kl": self.kl_above, "ratio": self.ratio_above, "entropy": self.ent_below}
            self.onset = step + 2 - max(run.get(fired, 1), 1)
            return fired
        return None

    @staticmethod
    def _schmitt(count: int, value: float | None, bound: float, release: float) -> int:
        """Excursion length after ``value`` (module docstring): starts (1) beyond ``bound``,
        grows by 1 per step while above ``release * bound``, else 0; None leaves it."""
        if value is None:
            return count
        return count + 1 if value > bound or (count and value > release * bound) else 0

    def _criterion(self, reward, kl, log_ratio, loss, grad_norm, entropy=None) -> str | None:
        cfg = self.cfg
        if any(
            x is not None and not math.isfinite(x) for x in (reward, kl, log_ratio, loss, grad_norm)
        ):
            return "nan"
        self.ema = (
            reward
            if self.ema is None
            else cfg.reward_ema * reward + (1 - cfg.reward_ema) * self.ema
        )
        self.best = max(self.best, self.ema)
        armed = self.best > cfg.min_best
        self.below = self.below + 1 if armed and self.ema < cfg.reward_frac * self.best else 0
        # (a step without an update leaves the counts as they are)
        self.kl_above = self._schmitt(self.kl_above, kl, cfg.kl_max, cfg.release)
        self.ratio_above = self._schmitt(
            self.ratio_above, log_ratio, cfg.log_ratio_max, cfg.release
        )
        if entropy is not None and cfg.entropy_frac > 0:
            if len(self.ent_early) < cfg.patience:
                self.ent_early.append(entropy)
            else:  # a drop is a rise of -entropy past -frac * early mean
                ref = cfg.entropy_frac * sum(self.ent_early) / len(self.ent_early)
                neg = 1.0 / max(entropy, 1e-12)  # 1/entropy rises past 1/ref
                self.ent_below = self._schmitt(self.ent_below, neg, 1.0 / ref, cfg.release)
        if self.kl_above >= cfg.kl_patience:
            return "kl"
        if self.ratio_above >= cfg.kl_patience:
            return "ratio"
        if self.ent_below >= cfg.kl_patience:
            return "entropy"
        if self.below >= cfg.patience:
            return "reward"
        return None

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state."""
        return {
            "ema": self.ema,
            "best": self.best if math.isfinite(self.best) else None,
            "below": self.below,
            "kl_above": self.kl_above,
            "ratio_above": self.ratio_above,
            "ent_below": self.ent_below,
            "ent_early": self.ent_early,
            "onset": self.onset,
            "t_collapse": self.t_collapse,
            "failure": self.failure,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        self.ema, self.below = state["ema"], state["below"]
        self.kl_above = int(state.get("kl_above", 0))  # (absent in older checkpoints)
        self.ratio_above = int(state.get("ratio_above", 0))
        self.ent_below = int(state.get("ent_below", 0))
        self.ent_early = list(state.get("ent_early", []))
        self.onset = state.get("onset")
        self.best = -math.inf if state["best"] is None else state["best"]
        self.t_collapse, self.failure = state["t_collapse"], state["failure"]


def replay(steps: Iterable[dict[str, Any]], cfg: CollapseConfig | None = None) -> CollapseDetector:
    """A detector fed every row of a run's step table in step order (after the run, or
    after a resume: the whole run is judged, not only the resumed part).

    ``steps``: dicts with ``step`` and ``reward_mean`` and, where known, ``kl``,
    ``log_ratio``, ``loss``, ``grad_norm`` and ``entropy`` (None for a step without an update).
    Returns the :class:`CollapseDetector` (``collapsed``, ``t_collapse``, ``failure``).
    """
    d = CollapseDetector(cfg or CollapseConfig())
    for r in sorted(steps, key=lambda r: r["step"]):
        reward = r.get("reward_mean")
        d.observe(
            int(r["step"]),
            math.nan if reward is None else float(reward),
            *(r.get(k) for k in ("kl", "log_ratio", "loss", "grad_norm", "entropy")),
        )
    return d


def judge_run(
    steps: Iterable[dict[str, Any]],
    evals: Iterable[dict[str, Any]],
    cfg: CollapseConfig | None = None,
) -> CollapseDetector:
    """The whole run's judgement (``real sync``'s ``collapse.json``): :func:`replay` of its
    step table with the KL criterion held for ``patience`` steps, then criterion 5 on its
    held-out evaluations (``evals``: ``eval.jsonl`` rows with ``step`` (-1 = before the
    first step) and ``accuracy``): when the last accuracy is below ``reward_frac`` times
    the best, the run collapsed at the first evaluation after the best that is below it
    (``t_collapse`` = that step + 1), unless a step criterion fired first."""
    base = cfg or CollapseConfig()
    d = replay(steps, dataclasses.replace(base, kl_patience=base.patience))
    rows = sorted((e for e in evals if e.get("accuracy") is not None), key=lambda e: int(e["step"]))
    if d.collapsed or not rows:
        return d
    acc = [float(e["accuracy"]) for e in rows]
    best_at = max(range(len(acc)), key=acc.__getitem__)
    best = acc[best_at]
    if best > base.min_best and acc[-1] < base.reward_frac * best:
        first = next(i for i in range(best_at, len(acc)) if acc[i] < base.reward_frac * best)
        d.t_collapse, d.failure = max(int(rows[first]["step"]), 0) + 1, "heldout"
    return d


def outcome(d: CollapseDetector, **head: Any) -> dict[str, Any]:
    """``collapse.json``'s document: ``head`` (run settings), then ``collapsed``,
    ``t_collapse`` (1-based learner step, None when it did not collapse) and ``failure``
    (one of :data:`FAILURES`)."""
    return {**head, "collapsed": d.collapsed, "t_collapse": d.t_collapse, "failure": d.failure}
