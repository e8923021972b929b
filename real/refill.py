"""DAPO dynamic sampling with refill for the real loops: regenerate until B informative groups.

As DAPO (Yu et al. 2025, arXiv 2503.14476, §3.2, eq. 11) and verl's ``RayDAPOTrainer``
(``algorithm.filter_groups``), and as the simulator does it (docs/dynamic_sampling.md on
the ``learnsim`` branch): per step,

1. a round generates ``B`` fresh prompts x ``G`` samples and scores them;
2. informative groups (rewards not all equal) are kept in prompt order until ``B`` are
   kept: never more (the surplus of the last round is dropped, as verl truncates the
   batch), never a homogeneous group;
3. while fewer than ``B`` are kept, another round runs, up to ``max_gen_batches`` rounds
   (0 = unlimited);
4. **abort**: when the cap is reached with fewer than ``B`` kept, verl raises and training
   stops; here the step is recorded with ``dynamic_sampling_abort = true`` and trains on
   the groups it kept (none kept: no update).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from rolloutlab.real.grpo import informative_groups


@dataclass(frozen=True)
class RefillOutcome:
    """What the rounds of one step produced."""

    keep: torch.Tensor
    """Bool ``(rounds * B,)``: the groups trained on, in generation order."""
    informative: torch.Tensor
    """Bool ``(rounds * B,)``: the groups whose rewards are not all equal."""
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
    """Call ``generate_round(r)`` for ``r = 0, 1, ...`` (each returns the round's rewards
    ``(n_r, G_r)``) until ``batch_size`` informative groups are kept or ``max_gen_batches``
    rounds ran (0 = unlimited; the module docstring has the rule).

    Raises: ValueError for ``batch_size < 1`` or ``max_gen_batches < 0``.
    """
    if batch_size < 1 or max_gen_batches < 0:
        raise ValueError(
            f"run_rounds: need batch_size >= 1 and max_gen_batches >= 0, got "
            f"{batch_size}, {max_gen_batches}"
        )
    keeps, infos, kept, r = [], [], 0, 0
    while True:
        inf = informative_groups(generate_round(r))
        keep = inf.clone()
        for i in torch.nonzero(inf).flatten().tolist():
            if kept < batch_size:
                kept += 1
            else:
                keep[i] = False
        keeps.append(keep)
        infos.append(inf)
        r += 1
        done = kept >= batch_size
        if done or (max_gen_batches and r >= max_gen_batches):
            return RefillOutcome(torch.cat(keeps), torch.cat(infos), r, not done)


def sampling_record(
    rewards: torch.Tensor,
    keep: torch.Tensor,
    results: Sequence[Any],
    G: int,
    outcome: RefillOutcome | None,
) -> dict[str, Any]:
    """The step's sampling columns (the simulator's step-table names, docs/dynamic_sampling.md
    on ``learnsim``) for ``learner.jsonl``.

    ``rewards`` ``(n, G)`` and ``keep`` ``(n,)`` cover every generated group; ``results``
    its ``n * G`` rollouts in group order (``t_submit_s``, ``t_finish_s`` in s);
    ``outcome`` is None without refill (one round, no abort possible: ``null``).
    ``wasted_rollout_s`` sums ``t_finish - t_submit`` over the rollouts of groups not trained on.
    """
    n = int(rewards.shape[0])
    informative = int(informative_groups(rewards).sum())
    wasted = sum(
        r.t_finish_s - r.t_submit_s for i, r in enumerate(results) if not bool(keep[i // G])
    )
    return {
        "informative_groups": informative,
        "informative_frac": informative / n if n else None,
        "gen_rounds": 1 if outcome is None else outcome.rounds,
        "generated_groups": n,
        "kept_groups": int(keep.sum()),
        "dynamic_sampling_abort": None if outcome is None else outcome.aborted,
        "wasted_rollout_s": float(wasted),
    }
