"""The phases of a training step besides generation and the learner update: the reward
phase and the periodic phases (validation, checkpoint).

**Reward phase.** Each rollout needs a reward request (a rule, a reward model, a judge,
a sandbox) whose latency is drawn from :class:`RewardLatency`; ``workers`` requests run
at once (verl's ``RayAsyncRewardAgent`` keeps a thread pool of ``max_concurrency``, 256
by default), first come first served. When they are submitted and what hides them is
``overlap`` (names follow verl's trainer, ``verl/trainer/ppo/ray_trainer.py``):

* ``"after"`` — all requests at the end of generation, nothing runs meanwhile (verl's
  ``compute_reward`` inside ``marked_timer("reward")``): the step waits the whole
  reward makespan.
* ``"learner"`` — all requests at the end of generation, the log-prob passes
  (``old_log_prob``, ``ref``) run meanwhile and the advantage step waits for the rest
  (verl's ``launch_reward_fn_async`` / ``compute_reward_async.remote`` awaited by
  ``ray.get`` under ``marked_timer("adv")``): the step waits
  ``max(0, makespan - learner_overlap_share * learner time)``.
* ``"generation"`` — each request when its rollout finishes (verl's reward loop in the
  agent-loop rollout scores each sample as it completes): the step waits
  ``max(0, last reward - generation end)``.

The step then pays ``adv_s`` (the advantage computation). The makespan of ``n``
requests on ``W`` workers is the FIFO multi-server queue (:func:`reward_finish_s`).

**Periodic phases.** A phase of ``seconds`` on the steps whose 1-based index is a
multiple of ``every`` (verl's ``global_steps % test_freq == 0``, ``% save_freq == 0``).

With no :class:`StepPhases` (every bundled scenario) a step has neither, bit for bit as
before these phases existed.
"""

from __future__ import annotations

import heapq
from dataclasses import asdict, dataclass, field

import numpy as np

OVERLAPS = ("after", "learner", "generation")


@dataclass(frozen=True)
class RewardLatency:
    """Per-rollout reward latency (s): ``kind`` with its parameters.

    ``constant``: ``a`` seconds; ``uniform``: ``U(a, b)``; ``lognormal``:
    ``exp(N(log a, b^2))`` (``a`` the median, ``b`` sigma of log latency).
    """

    kind: str = "constant"
    a: float = 0.0
    b: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("constant", "uniform", "lognormal"):
            raise ValueError(
                f"reward latency: kind must be constant, uniform or lognormal, got {self.kind!r}"
            )
        if not (np.isfinite(self.a) and np.isfinite(self.b) and self.a >= 0 and self.b >= 0):
            raise ValueError(f"reward latency: parameters must be finite and >= 0, got {self}")
        if self.kind == "uniform" and self.b < self.a:
            raise ValueError(f"reward latency: uniform needs a <= b, got {self.a}, {self.b}")
        if self.kind == "lognormal" and self.a <= 0:
            raise ValueError(f"reward latency: lognormal needs a median a > 0, got {self.a}")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``(n,)`` latencies in seconds."""
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b, n)
        if self.kind == "lognormal":
            return self.a * np.exp(self.b * rng.standard_normal(n))
        return np.full(n, self.a)

    def scaled(self, k: float) -> RewardLatency:
        """The law of ``k`` times a latency (``k >= 0``)."""
        if self.kind == "lognormal":
            return RewardLatency(self.kind, self.a * k, self.b)
        return RewardLatency(self.kind, self.a * k, self.b * k)

    def mean_s(self) -> float:
        """Mean latency (s)."""
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        if self.kind == "lognormal":
            return float(self.a * np.exp(self.b**2 / 2))
        return self.a


@dataclass(frozen=True)
class RewardPhase:
    """Reward requests of a step (module docstring)."""

    latency: RewardLatency
    """Per-rollout latency law."""
    workers: int = 256
    """Requests served at once (verl ``RayAsyncRewardAgent``'s ``max_concurrency``)."""
    overlap: str = "learner"
    """``after``, ``learner`` or ``generation`` (module docstring)."""
    learner_overlap_share: float = 0.0
    """Share of the learner time that runs while rewards compute (``overlap="learner"``:
    verl's ``old_log_prob + ref`` over ``old_log_prob + ref + update_actor``)."""
    adv_s: float = 0.0
    """Advantage computation after the last reward (s)."""

    def __post_init__(self) -> None:
        if self.overlap not in OVERLAPS:
            raise ValueError(
                f"reward phase: overlap must be one of {OVERLAPS}, got {self.overlap!r}"
            )
        if not (isinstance(self.workers, int) and self.workers >= 1):
            raise ValueError(f"reward phase: workers must be an integer >= 1, got {self.workers!r}")
        if not 0.0 <= self.learner_overlap_share <= 1.0:
            raise ValueError(
                "reward phase: learner_overlap_share must be in [0, 1], "
                f"got {self.learner_overlap_share}"
            )
        if not (np.isfinite(self.adv_s) and self.adv_s >= 0):
            raise ValueError(f"reward phase: adv_s must be finite and >= 0, got {self.adv_s}")


@dataclass(frozen=True)
class PeriodicPhase:
    """A phase run every ``every`` steps (verl ``testing``, ``save_checkpoint``)."""

    name: str
    every: int
    """Period in steps: runs when the 1-based step index is a multiple of it."""
    seconds: float
    """Time of one run (s)."""

    def __post_init__(self) -> None:
        if not (isinstance(self.every, int) and self.every >= 1):
            raise ValueError(f"periodic phase {self.name}: every must be an integer >= 1")
        if not (np.isfinite(self.seconds) and self.seconds >= 0):
            raise ValueError(f"periodic phase {self.name}: seconds must be finite and >= 0")

    def runs_at(self, step: int) -> bool:
        """Whether it runs on 0-based step ``step`` (1-based index ``step + 1``)."""
        return (step + 1) % self.every == 0


@dataclass(frozen=True)
class StepPhases:
    """The reward phase (or none) and the periodic phases of every step."""

    reward: RewardPhase | None = None
    periodic: tuple[PeriodicPhase, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        """The scenario's ``step_phases`` block (JSON-able)."""
        return {
            "reward": None if self.reward is None else asdict(self.reward),
            "periodic": [asdict(p) for p in self.periodic],
        }

    @classmethod
    def from_dict(cls, d: dict) -> StepPhases:
        """Inverse of :meth:`to_dict`. Raises ValueError/TypeError naming the field."""
        r = d.get("reward")
        reward = None
        if r is not None:
            lat = r.get("latency")
            if not isinstance(lat, dict):
                raise ValueError("step_phases.reward.latency must be an object")
            reward = RewardPhase(
                latency=RewardLatency(
                    str(lat.get("kind")), float(lat.get("a", 0.0)), float(lat.get("b", 0.0))
                ),
                workers=_int(r.get("workers", 256), "step_phases.reward.workers"),
                overlap=str(r.get("overlap", "learner")),
                learner_overlap_share=float(r.get("learner_overlap_share", 0.0)),
                adv_s=float(r.get("adv_s", 0.0)),
            )
        periodic = tuple(
            PeriodicPhase(
                str(p["name"]),
                _int(p["every"], "step_phases.periodic.every"),
                float(p["seconds"]),
            )
            for p in d.get("periodic", [])
        )
        return cls(reward, periodic)


def _int(v, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int | float) or int(v) != v:
        raise ValueError(f"{where}: expected an integer, got {v!r}")
    return int(v)


def reward_finish_s(arrival_s: np.ndarray, latency_s: np.ndarray, workers: int) -> float:
    """Time (s) the last of ``n`` reward requests finishes on ``workers`` FIFO servers.

    ``arrival_s`` ``(n,)`` submission times (served in arrival order, ties by index),
    ``latency_s`` ``(n,)`` service times. Empty input: 0.
    """
    arrival_s = np.asarray(arrival_s, dtype=np.float64)
    latency_s = np.asarray(latency_s, dtype=np.float64)
    n = len(arrival_s)
    if n == 0:
        return 0.0
    order = np.argsort(arrival_s, kind="stable")
    arr, lat = arrival_s[order], latency_s[order]
    if workers >= n:  # nobody queues
        return float(np.max(arr + lat))
    # the first `workers` requests start on arrival; each later one on the earliest free
    # server. Every server's last finish is its latest, so the makespan is the heap's max.
    # (why heapreplace and two loops: one C call per request, ~10x the pop/push loop)
    free = (arr[:workers] + lat[:workers]).tolist()
    heapq.heapify(free)
    if arr[-1] == arr[0]:  # all at once (overlap after / learner)
        a0 = float(arr[0])
        for s in lat[workers:].tolist():
            heapq.heapreplace(free, (free[0] if free[0] > a0 else a0) + s)
    else:
        for a, s in zip(arr[workers:].tolist(), lat[workers:].tolist()):
            heapq.heapreplace(free, (free[0] if free[0] > a else a) + s)
    return float(max(free))


def reward_rng(seed: int, step: int) -> np.random.Generator:
    """The latency draws of step ``step``: keyed on ``(seed, step)``, so two controllers
    on one seed see the same draws (the first ``n`` of the same stream)."""
    return np.random.default_rng([seed, step, 0x5EED_2E3A])


def reward_wait_s(
    phase: RewardPhase,
    t_finish_s: np.ndarray,
    gen_s: float,
    learner_s: float,
    rng: np.random.Generator,
) -> float:
    """Seconds the step waits for rewards after generation and the overlapped learner
    passes, plus ``adv_s``.

    ``t_finish_s`` ``(n,)``: each rollout's finish time from the step start (s);
    ``gen_s``: the generation phase (s); ``learner_s``: the learner time of the step (s).
    """
    n = len(t_finish_s)
    lat = phase.latency.sample(rng, n)
    if phase.overlap == "generation":
        wait = reward_finish_s(np.asarray(t_finish_s, dtype=np.float64), lat, phase.workers) - gen_s
    else:
        wait = reward_finish_s(np.zeros(n), lat, phase.workers)
        if phase.overlap == "learner":
            wait -= phase.learner_overlap_share * learner_s
    return max(0.0, float(wait)) + phase.adv_s


def periodic_s(phases: StepPhases, step: int) -> float:
    """Seconds of the periodic phases that run on 0-based step ``step``."""
    return float(sum(p.seconds for p in phases.periodic if p.runs_at(step)))


def extra_step_s(
    phases: StepPhases,
    step: int,
    seed: int,
    t_finish_s: np.ndarray,
    gen_s: float,
    learner_s: float,
) -> tuple[float, float]:
    """``(reward wait incl. advantage, periodic)`` seconds of 0-based step ``step``: the
    time the step adds to generation + learner + weight sync."""
    wait = 0.0
    if phases.reward is not None:
        wait = reward_wait_s(phases.reward, t_finish_s, gen_s, learner_s, reward_rng(seed, step))
    return wait, periodic_s(phases, step)
