"""One step's length law, and the observation it gives for a proposed G.

A :class:`StepLaw` is what the kit's hypothesis strategies draw: small, readable (it is
what a failure report prints as the smallest failing example) and closed-loop ready:
:func:`materialize` turns it into the observation of a step run at whatever G the
controller proposed, deterministically from the law's ``seed``. The observation holds
every field of :class:`rolloutlab.sim.control.observation.Observation` (version 2), with times
from a simple synchronous model (generation waits for the longest rollout).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

SHAPES = ("lognormal", "pareto", "equal", "cap_straggler")
"""Length laws: lognormal (``median e^(spread z)``), pareto (heavy tail, tail index
``spread``), every rollout equal, or every rollout equal but one at the cap."""

REWARDS = ("none", "zeros", "ones", "mixed")
"""Rewards of a step: absent (a run without rewards), all 0, all 1, or Bernoulli(1/2)."""

SECONDS_PER_TOKEN = 0.02
"""Generation time per token of the longest rollout (s): the model's decode rate."""

LEARNER_SECONDS_PER_TOKEN = 2e-4
"""Learner update time per response token (s)."""


@dataclass(frozen=True)
class StepLaw:
    """One step: ``shape`` (:data:`SHAPES`) with median ``median`` tokens and
    ``spread`` (lognormal sigma, or pareto tail index: smaller is heavier), ``prompts``
    groups, ``rewards`` (:data:`REWARDS`), ``group``: None for groups of the proposed G,
    or a fixed group size (1: a step whose groups were trimmed to one rollout);
    lengths clipped to ``[1, cap]``; ``seed`` of the draws."""

    shape: str = "lognormal"
    median: int = 200
    spread: float = 1.0
    prompts: int = 2
    rewards: str = "none"
    group: int | None = None
    seed: int = 0
    cap: int = 4096

    def describe(self) -> str:
        """One line: every field, for a failure report."""
        group = "the proposed G" if self.group is None else str(self.group)
        return (
            f"{self.shape}, median {self.median} tokens, spread {self.spread:g}, "
            f"{self.prompts} prompt(s), rewards {self.rewards}, groups of {group}, "
            f"cap {self.cap}, seed {self.seed}"
        )

    def prompt_ids(self, step: int) -> np.ndarray:
        """``(prompts,)`` int64 ids of step ``step``'s prompts (a fresh batch per step)."""
        return step * 1000 + np.arange(self.prompts, dtype=np.int64)


def _lengths(law: StepLaw, G: int, rng: np.random.Generator) -> np.ndarray:
    """``(prompts, G)`` int64 lengths in ``[1, cap]``."""
    shape = (law.prompts, G)
    if law.shape == "lognormal":
        raw = law.median * np.exp(law.spread * rng.standard_normal(shape))
    elif law.shape == "pareto":
        raw = law.median * (1.0 + rng.pareto(max(law.spread, 0.1), shape))
    elif law.shape in ("equal", "cap_straggler"):
        raw = np.full(shape, float(law.median))
        if law.shape == "cap_straggler":
            raw[0, 0] = law.cap
    else:
        raise ValueError(f"StepLaw: shape must be one of {SHAPES}, got {law.shape!r}")
    return np.clip(np.round(raw), 1, law.cap).astype(np.int64)


def _rewards(law: StepLaw, shape: tuple[int, int], rng: np.random.Generator) -> Any:
    if law.rewards == "none":
        return None
    if law.rewards == "zeros":
        return np.zeros(shape)
    if law.rewards == "ones":
        return np.ones(shape)
    return (rng.random(shape) < 0.5).astype(np.float64)


def materialize(law: StepLaw, G: int, step: int, clock_s: float = 0.0) -> dict[str, Any]:
    """The observation of step ``step`` run at group size ``G`` under ``law``, as the
    keyword arguments of :func:`rolloutlab.sim.control.observation.observe_step` (``lengths``
    a list of lists, ``rewards`` and ``finish_reasons`` ``(prompts, G)`` arrays,
    ``prompt_ids``, ``gen_time_s``, ``learner_time_s``, ``step_time_s`` and
    ``wall_clock_s`` = ``clock_s`` + the step time, in seconds). Deterministic in
    ``(law, G, step)``."""
    g = G if law.group is None else law.group
    rng = np.random.default_rng([law.seed, step, g])
    lengths = _lengths(law, g, rng)
    gen = SECONDS_PER_TOKEN * float(lengths.max())
    learn = LEARNER_SECONDS_PER_TOKEN * float(lengths.sum())
    return {
        "lengths": lengths.tolist(),
        "rewards": _rewards(law, lengths.shape, rng),
        "prompt_ids": law.prompt_ids(step),
        "finish_reasons": np.where(lengths >= law.cap, "length", "stop"),
        "gen_time_s": gen,
        "learner_time_s": learn,
        "step_time_s": gen + learn,
        "wall_clock_s": clock_s + gen + learn,
    }
