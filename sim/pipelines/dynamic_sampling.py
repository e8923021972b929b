"""Dynamic sampling (DAPO; verl ``algorithm.filter_groups``) and the prompt stream.

DAPO (Yu et al. 2025, arXiv 2503.14476, §3.2 "Dynamic Sampling") over-samples and keeps
only groups whose rewards are not all equal, until the batch holds B of them; verl's
``RayDAPOTrainer`` generates ``gen_batch_size`` prompts per round and stops after
``max_num_gen_batches`` rounds (0 = unlimited) with an error. Here, per learner step
(``max_gen_batches`` defaults to the DAPO recipe's 10, :data:`DEFAULT_MAX_GEN_BATCHES`):

1. round 1 generates ``ceil(F B)`` prompts (``F`` = :attr:`DynamicSampling.gen_batch_factor`);
2. informative groups are kept in prompt order until ``B`` are kept (never more: the
   surplus is dropped, as verl truncates to ``B``); homogeneous groups are dropped;
3. while fewer than ``B`` are kept, another round generates ``ceil(F B)`` prompts
   (``refill="batch"``) or only the ``B - kept`` missing ones (``refill="missing"``);
4. after ``max_gen_batches`` rounds with fewer than ``B`` kept (``k > 0``), the step is
   recorded as aborted (``dynamic_sampling_abort = True``) and trains on the groups it
   kept (none: no update, no sync). verl raises instead; a simulator that records it and
   continues lets a sweep report how often it happens.

Prompt stream: one counter over the run; each round takes the next prompts from it
(ids modulo ``dataset_size`` when set). Without dynamic sampling step ``t`` takes
``t B .. t B + B - 1``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from rolloutlab.sim.models.reward_metrics import informative
from rolloutlab.sim.pipelines.spec import DEFAULT_MAX_GEN_BATCHES, MAX_ROUNDS, REFILLS

__all__ = ["DEFAULT_MAX_GEN_BATCHES", "MAX_ROUNDS", "Collector", "DynamicSampling", "PromptStream"]


@dataclass(frozen=True)
class DynamicSampling:
    """DAPO dynamic-sampling settings (module docstring)."""

    gen_batch_factor: float = 1.0
    """``F >= 1``: prompts generated per round, as a multiple of B (verl
    ``data.gen_batch_size / data.train_batch_size``)."""
    max_gen_batches: int = DEFAULT_MAX_GEN_BATCHES
    """Rounds allowed per step (verl ``algorithm.filter_groups.max_num_gen_batches``);
    0 = unlimited up to :data:`MAX_ROUNDS`; default :data:`DEFAULT_MAX_GEN_BATCHES`."""
    refill: str = "batch"
    """``batch``: each round ``ceil(F B)`` prompts; ``missing``: later rounds only ``B - kept``."""

    def __post_init__(self) -> None:
        if not (self.gen_batch_factor >= 1.0) or math.isinf(self.gen_batch_factor):
            raise ValueError(
                f"--gen-batch-factor: must be a finite number >= 1, got {self.gen_batch_factor}"
            )
        if self.max_gen_batches < 0:
            raise ValueError(f"--max-gen-batches: must be >= 0, got {self.max_gen_batches}")
        if self.refill not in REFILLS:
            raise ValueError(f"--refill: expected one of {REFILLS}, got {self.refill!r}")


@dataclass
class PromptStream:
    """The run's prompt ids in order: :meth:`take` returns the next ``n``."""

    dataset_size: int | None = None
    pos: int = 0

    def peek(self, n: int) -> np.ndarray:
        """The ids the next :meth:`take` of ``n`` returns, without advancing."""
        ids = self.pos + np.arange(n, dtype=np.int64)
        return ids % self.dataset_size if self.dataset_size else ids

    def take(self, n: int, rows: int | None = None) -> np.ndarray:
        """``(n,)`` int64 ids ``pos .. pos+n-1`` (modulo ``dataset_size``), or ``rows``
        consecutive takes of ``n`` as ``(rows, n)``; advances."""
        total = n if rows is None else n * rows
        ids = self.pos + np.arange(total, dtype=np.int64)
        self.pos += total
        ids = ids % self.dataset_size if self.dataset_size else ids
        return ids if rows is None else ids.reshape(rows, n)


@dataclass
class Collector:
    """Which groups of a step's generation rounds are trained (module docstring).

    ``ds`` ``None``: one round of ``B`` prompts, every group kept (rewards or not).
    Use: ``while (n := c.next_count()): ... c.add(correct)``.
    """

    B: int
    ds: DynamicSampling | None = None
    rounds: int = 0
    generated: int = 0
    kept: int = 0
    abort: bool = False
    kept_idx: list[np.ndarray] = field(default_factory=list)
    """Per round: indices of the kept groups within the round."""

    def next_count(self) -> int:
        """Prompts to generate in the next round; 0 when the step is complete or aborted.
        Raises RuntimeError after :data:`MAX_ROUNDS` rounds of an unlimited step."""
        if self.ds is None:
            return self.B if self.rounds == 0 else 0
        if self.kept >= self.B or self.abort:
            return 0
        if self.rounds and self.ds.max_gen_batches and self.rounds >= self.ds.max_gen_batches:
            self.abort = True
            return 0
        if self.rounds >= MAX_ROUNDS:
            raise RuntimeError(
                f"dynamic sampling: {MAX_ROUNDS} generation rounds kept {self.kept} of "
                f"{self.B} informative groups (pass rates all near 0 or 1, or G = 1?); "
                f"give --max-gen-batches K (verl's DAPO recipe: {DEFAULT_MAX_GEN_BATCHES}) to "
                "record such steps as aborted instead"
            )
        if self.rounds and self.ds.refill == "missing":
            return self.B - self.kept
        return math.ceil(self.ds.gen_batch_factor * self.B - 1e-9)

    def add(self, correct: np.ndarray | None, n: int) -> np.ndarray:
        """Record a round of ``n`` groups (``correct`` (n, G) bool, ``None`` without
        rewards); return the indices kept (informative ones in order, up to ``B`` in all)."""
        self.rounds += 1
        self.generated += n
        if self.ds is None:
            idx = np.arange(n)
        elif correct is None:
            raise ValueError("Collector: dynamic sampling needs the round's rewards")
        else:
            idx = np.flatnonzero(informative(correct))[: self.B - self.kept]
        self.kept += len(idx)
        self.kept_idx.append(idx)
        return idx
