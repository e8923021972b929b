"""Data-parallel load imbalance of a learner step: the slowest rank sets the step time.

A data-parallel trainer splits each optimizer update's ``n`` sequences over ``ranks``
ranks, ``n / ranks`` each, and every update ends in a collective (gradient all-reduce or
reduce-scatter) that waits for the rank with the most work. With a token-proportional
cost, the update takes ``max_r T_r`` of the ranks' token sums ``T_r``, not their mean, so
the token-proportional terms of :func:`sim.models.learner_cost.learner_phases` are
multiplied by the imbalance factor ``E[max_r T_r] / E[mean_r T_r]`` (>= 1). Heavy-tailed
response lengths and few sequences per rank make it large; it falls towards 1 as the
sequences per rank grow (the sums concentrate).

:func:`imbalance_factor` estimates it by Monte Carlo with a fixed seed (``draws``
independent updates drawn from the scenario's length model, ``sample(rng, prompts, G,
step)``), under two assignments:

- ``contiguous``: rank ``r`` takes sequences ``[r k, (r + 1) k)`` of the update in batch
  order, as verl's ``DataProto.chunk`` does without balancing (so a prompt's ``G``
  rollouts, whose lengths are correlated, land on the same rank);
- ``balanced``: longest-processing-time-first with equal counts (each sequence, longest
  first, goes to the least-loaded rank that still has room for it; Graham 1969, "Bounds on
  multiprocessing timing anomalies", SIAM J. Appl. Math. 17(2), the LPT rule). verl's
  ``trainer.balance_batch`` reorders the batch with an equal-size Karmarkar-Karp
  partition of sequence lengths over the data-parallel ranks (Karmarkar & Karp 1982,
  "The differencing method of set partitioning"; ``verl/utils/seqlen_balancing.py``);
  LPT is a close, simpler heuristic for the same problem. Balancing per update is an
  optimistic model of verl's, which balances the whole batch before it is cut into
  mini-batches. docs/PAPERS.md §4 lists the sources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from rolloutlab.sim.models.lengths import LengthModel

ASSIGNMENTS = ("contiguous", "balanced")
"""How an update's sequences are dealt to the ranks (module docstring)."""


def rank_loads(lengths: np.ndarray, ranks: int, assignment: str = "contiguous") -> np.ndarray:
    """Token sums per rank, ``(draws, ranks)``, of ``lengths`` ``(draws, n)`` (tokens per
    sequence, ``n`` a multiple of ``ranks``) dealt ``n / ranks`` to each rank by
    ``assignment`` (:data:`ASSIGNMENTS`). Raises ValueError on a bad assignment, ``ranks <
    1`` or ``n`` not a multiple of ``ranks``."""
    if assignment not in ASSIGNMENTS:
        raise ValueError(
            f"dp imbalance: assignment must be one of {ASSIGNMENTS}, got {assignment!r}"
        )
    x = np.asarray(lengths, dtype=np.float64)
    draws, n = x.shape
    if ranks < 1 or n % ranks:
        raise ValueError(f"dp imbalance: {n} sequences do not split evenly over {ranks} ranks")
    k = n // ranks
    if assignment == "contiguous":
        return x.reshape(draws, ranks, k).sum(axis=2)
    loads = np.zeros((draws, ranks))
    counts = np.zeros((draws, ranks), dtype=np.int64)
    rows = np.arange(draws)
    for col in np.sort(x, axis=1)[:, ::-1].T:  # longest first
        r = np.where(counts < k, loads, np.inf).argmin(axis=1)
        loads[rows, r] += col
        counts[rows, r] += 1
    return loads


def imbalance_factor(
    lengths: LengthModel,
    sequences: int,
    ranks: int,
    G: int,
    prompt_tokens: int = 0,
    assignment: str = "contiguous",
    draws: int = 64,
    seed: int = 0,
    step: int = 0,
) -> float:
    """``E[max_r T_r] / E[mean_r T_r]`` for updates of ``sequences`` sequences (``G`` per
    prompt, each ``prompt_tokens`` + its response from ``lengths`` at ``step``) over
    ``ranks`` data-parallel ranks, by Monte Carlo over ``draws`` updates from
    ``np.random.default_rng(seed)`` (module docstring). Exactly 1 for one rank. When
    ``sequences`` is not a multiple of ``ranks`` it is rounded up to one (padding ranks
    get whole sequences, as verl requires divisibility). Raises ValueError on ``sequences,
    ranks, G, draws < 1``, ``prompt_tokens < 0`` or a bad ``assignment``."""
    if min(sequences, ranks, G, draws) < 1 or prompt_tokens < 0:
        raise ValueError(
            f"dp imbalance: need sequences, ranks, G, draws >= 1 and prompt_tokens >= 0, got "
            f"{sequences}, {ranks}, {G}, {draws}, {prompt_tokens}"
        )
    if ranks == 1:
        return 1.0
    n = math.ceil(sequences / ranks) * ranks
    rng = np.random.default_rng(seed)
    prompts = math.ceil(n / G)
    x = np.stack([lengths.sample(rng, prompts, G, step).reshape(-1)[:n] for _ in range(draws)])
    loads = rank_loads(x + prompt_tokens, ranks, assignment)
    return float(loads.max(axis=1).mean() / loads.mean())


@dataclass(frozen=True)
class Imbalance:
    """How a trainer deals each optimizer update's sequences to its data-parallel ranks."""

    sequences: int
    """Sequences per optimizer update, over all ranks (verl: ``ppo_mini_batch_size x n``)."""
    G: int
    """Rollouts per prompt (consecutive in the batch)."""
    assignment: str = "contiguous"
    """:data:`ASSIGNMENTS`; verl's ``trainer.balance_batch=True`` is ``balanced``."""
    sp: int = 1
    """GPUs per data-parallel rank besides TP x PP (Ulysses sequence parallelism: verl's
    ``ulysses_sequence_parallel_size``), so ranks = data-parallel GPUs / ``sp``."""

    def factor(self, lengths: LengthModel, prompt_tokens: int, dp_gpus: int) -> float:
        """:func:`imbalance_factor` over ``dp_gpus / sp`` ranks (at least 1). Raises
        ValueError as it, or when ``sp < 1`` or does not divide ``dp_gpus``."""
        if self.sp < 1 or dp_gpus % self.sp:
            raise ValueError(f"dp imbalance: sp {self.sp} does not divide {dp_gpus} GPUs")
        ranks = dp_gpus // self.sp
        return imbalance_factor(
            lengths, self.sequences, ranks, self.G, prompt_tokens, self.assignment
        )
