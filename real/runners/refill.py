"""DAPO dynamic sampling with refill for the real loops: regenerate until B informative groups.

The rule is the simulator's (:class:`sim.pipelines.dynamic_sampling.Collector`; DAPO, Yu et al. 2025,
arXiv 2503.14476, §3.2, eq. 11; verl ``RayDAPOTrainer`` ``algorithm.filter_groups``): per
step, rounds of ``B`` fresh prompts x ``G`` samples are generated and scored; informative
groups (rewards not all equal) are kept in prompt order until ``B`` are kept (the surplus
of the last round is dropped, never a homogeneous group); after ``max_gen_batches``
rounds (0 = unlimited) with fewer than ``B`` kept the step is recorded with
``dynamic_sampling_abort = true`` and trains on what it kept (verl raises instead). The
step-table columns are :func:`sim.models.reward_metrics.step_reward_columns`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from rolloutlab.sim.models.reward_metrics import step_reward_columns
from rolloutlab.sim.pipelines.dynamic_sampling import Collector, DynamicSampling


@dataclass(frozen=True)
class RefillOutcome:
    """What the rounds of one step produced."""

    keep: torch.Tensor
    """Bool ``(rounds * B,)``: the groups trained on, in generation order."""
    rounds: int
    """Generation rounds run (``gen_rounds``)."""
    aborted: bool
    """The cap stopped the step with fewer than ``B`` groups kept (``dynamic_sampling_abort``)."""

    @property
    def kept_groups(self) -> int:
        """Groups trained on (at most ``B``)."""
        return int(self.keep.sum())

    @property
    def generated_groups(self) -> int:
        """Groups generated over all rounds."""
        return int(self.keep.numel())


def run_rounds(
    generate_round: Callable[[int], torch.Tensor], batch_size: int, max_gen_batches: int
) -> RefillOutcome:
    """Call ``generate_round(r)`` for ``r = 0, 1, ...`` (each generates ``batch_size``
    prompts and returns their rewards ``(batch_size, G)``) until ``batch_size``
    informative groups are kept or ``max_gen_batches`` rounds ran (0 = unlimited).

    Raises: ValueError for ``max_gen_batches < 0`` or a round of another size;
    RuntimeError after :data:`sim.pipelines.dynamic_sampling.MAX_ROUNDS` rounds of an unlimited
    step (no group can become informative).
    """
    collector = Collector(batch_size, DynamicSampling(max_gen_batches=max_gen_batches))
    keeps = []
    while n := collector.next_count():
        rewards = generate_round(collector.rounds).detach().cpu().numpy()
        if rewards.shape[0] != n:
            raise ValueError(f"run_rounds: a round returned {rewards.shape[0]} groups, not {n}")
        keep = np.zeros(n, dtype=bool)
        keep[collector.add(rewards, n)] = True
        keeps.append(keep)
    return RefillOutcome(torch.from_numpy(np.concatenate(keeps)), collector.rounds, collector.abort)


def sampling_record(
    rewards: torch.Tensor,
    keep: torch.Tensor,
    results: Sequence[Any],
    G: int,
    outcome: RefillOutcome | None,
) -> dict[str, Any]:
    """The step's trace-v2 reward columns (:func:`sim.models.reward_metrics.step_reward_columns`).

    ``rewards`` ``(n, G)`` and ``keep`` ``(n,)`` cover every generated group; ``results``
    its ``n * G`` rollouts in group order (``t_submit_s``, ``t_finish_s`` in s);
    ``outcome`` is None without refill (one round, never an abort).
    ``wasted_rollout_s`` sums ``t_finish - t_submit`` over the rollouts of groups not trained on.
    """
    wasted = sum(
        r.t_finish_s - r.t_submit_s for i, r in enumerate(results) if not bool(keep[i // G])
    )
    return step_reward_columns(
        rewards.detach().cpu().numpy(),
        int(keep.sum()),
        1 if outcome is None else outcome.rounds,
        float(wasted),
        False if outcome is None else outcome.aborted,
    )
