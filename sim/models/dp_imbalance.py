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
  mini-batches;
- ``verl``: verl's own flow (``verl/trainer/ppo/ray_trainer.py`` ``_balance_batch``,
  ``verl/workers/sharding_manager/fsdp_ulysses.py`` ``preprocess_data``,
  ``verl/workers/actor/dp_actor.py`` ``update_policy``, commit ``9280c114``): one update
  call's sequences are partitioned as ``balanced`` over the trainer's GPUs, each
  partition kept in batch order; the ``sp`` GPUs of a Ulysses group gather their
  partitions into one rank's data, which the rank cuts into ``mini_batches`` contiguous
  mini-batches, one optimizer update each. Every mini-batch waits for its slowest rank,
  so the call costs ``sum_j max_r T_rj``: the factor is ``E[sum_j max_r T_rj] /
  E[sum_j mean_r T_rj]``. With ``mini_batches == sp`` each mini-batch is one balanced
  partition per rank (factor near 1); with more, each is a slice of one and the factor
  grows as the sequences per rank per mini-batch fall.

docs/PAPERS.md §4 lists the sources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from rolloutlab.sim.models.lengths import LengthModel

ASSIGNMENTS = ("contiguous", "balanced", "verl")
"""How an update's sequences are dealt to the ranks (module docstring)."""


def balanced_parts(lengths: np.ndarray, parts: int) -> np.ndarray:
    """Batch indices ``(draws, parts, n / parts)`` of an equal-size longest-processing-time
    partition of each row of ``lengths`` ``(draws, n)`` (each sequence, longest first, to
    the least-loaded part with room; ties to the lower part), each part in batch order.
    Raises ValueError on ``parts < 1`` or ``n`` not a multiple of ``parts``."""
    x = np.asarray(lengths, dtype=np.float64)
    draws, n = x.shape
    if parts < 1 or n % parts:
        raise ValueError(f"dp imbalance: {n} sequences do not split evenly over {parts} ranks")
    k = n // parts
    loads = np.zeros((draws, parts))
    counts = np.zeros((draws, parts), dtype=np.int64)
    owner = np.empty((draws, n), dtype=np.int64)
    rows = np.arange(draws)
    for col in np.argsort(-x, axis=1, kind="stable").T:  # longest first
        r = np.where(counts < k, loads, np.inf).argmin(axis=1)
        loads[rows, r] += x[rows, col]
        counts[rows, r] += 1
        owner[rows, col] = r
    return np.argsort(owner, axis=1, kind="stable").reshape(draws, parts, k)


def minibatch_loads(
    lengths: np.ndarray,
    ranks: int,
    assignment: str = "contiguous",
    sp: int = 1,
    mini_batches: int = 1,
) -> np.ndarray:
    """Token sums ``(draws, mini_batches, ranks)`` per mini-batch and rank of ``lengths``
    ``(draws, n)`` (tokens per sequence in batch order) dealt to ``ranks`` ranks by
    ``assignment`` (:data:`ASSIGNMENTS`): ``contiguous`` and ``balanced`` deal ``n / ranks``
    to each rank (``sp`` unused), ``verl`` partitions over ``ranks sp`` GPUs and gathers
    ``sp`` partitions a rank; each rank then cuts its sequences, in order, into
    ``mini_batches`` contiguous mini-batches. Raises ValueError on a bad assignment,
    ``ranks, sp, mini_batches < 1``, or counts that do not divide evenly."""
    if assignment not in ASSIGNMENTS:
        raise ValueError(
            f"dp imbalance: assignment must be one of {ASSIGNMENTS}, got {assignment!r}"
        )
    x = np.asarray(lengths, dtype=np.float64)
    draws, n = x.shape
    if min(ranks, sp, mini_batches) < 1 or n % ranks or (n // ranks) % mini_batches:
        raise ValueError(
            f"dp imbalance: {n} sequences do not split evenly over {ranks} ranks x "
            f"{mini_batches} mini-batches"
        )
    if assignment == "contiguous":
        per_rank = x.reshape(draws, ranks, n // ranks)
    else:
        parts = ranks * (sp if assignment == "verl" else 1)
        idx = balanced_parts(x, parts).reshape(draws, ranks, n // ranks)
        per_rank = np.take_along_axis(x[:, None, :], idx, axis=2)
    cut = per_rank.reshape(draws, ranks, mini_batches, n // ranks // mini_batches)
    return cut.sum(axis=3).transpose(0, 2, 1)


def rank_loads(lengths: np.ndarray, ranks: int, assignment: str = "contiguous") -> np.ndarray:
    """Token sums per rank, ``(draws, ranks)``, of ``lengths`` ``(draws, n)`` dealt ``n /
    ranks`` to each rank by ``assignment``: :func:`minibatch_loads` with one mini-batch
    and ``sp`` 1. Raises ValueError as it."""
    return minibatch_loads(lengths, ranks, assignment)[:, 0, :]


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
    sp: int = 1,
    mini_batches: int = 1,
) -> float:
    """``E[sum_j max_r T_rj] / E[sum_j mean_r T_rj]`` for calls of ``sequences`` sequences
    (``G`` per prompt, each ``prompt_tokens`` + its response from ``lengths`` at ``step``)
    over ``ranks`` data-parallel ranks, cut into ``mini_batches`` optimizer updates
    (``E[max_r T_r] / E[mean_r T_r]`` for one), by Monte Carlo over ``draws`` calls from
    ``np.random.default_rng(seed)`` (module docstring; ``sp`` matters to ``verl`` alone).
    Exactly 1 for one rank. When ``sequences`` does not split evenly it is rounded up
    until it does (verl requires divisibility). Raises ValueError on ``sequences, ranks,
    G, draws, sp, mini_batches < 1``, ``prompt_tokens < 0`` or a bad ``assignment``."""
    if min(sequences, ranks, G, draws, sp, mini_batches) < 1 or prompt_tokens < 0:
        raise ValueError(
            f"dp imbalance: need sequences, ranks, G, draws, sp, mini_batches >= 1 and "
            f"prompt_tokens >= 0, got {sequences}, {ranks}, {G}, {draws}, {sp}, "
            f"{mini_batches}, {prompt_tokens}"
        )
    if assignment not in ASSIGNMENTS:
        raise ValueError(
            f"dp imbalance: assignment must be one of {ASSIGNMENTS}, got {assignment!r}"
        )
    if ranks == 1:
        return 1.0
    unit = ranks * math.lcm(sp if assignment == "verl" else 1, mini_batches)
    n = math.ceil(sequences / unit) * unit
    rng = np.random.default_rng(seed)
    prompts = math.ceil(n / G)
    x = np.stack([lengths.sample(rng, prompts, G, step).reshape(-1)[:n] for _ in range(draws)])
    loads = minibatch_loads(x + prompt_tokens, ranks, assignment, sp, mini_batches)
    return float(loads.max(axis=2).sum(axis=1).mean() / loads.mean(axis=2).sum(axis=1).mean())


@dataclass(frozen=True)
class Imbalance:
    """How a trainer deals each optimizer update's sequences to its data-parallel ranks."""

    sequences: int
    """Sequences per balanced call, over all ranks: one optimizer update's
    (``ppo_mini_batch_size x n``) unless ``mini_batches`` > 1."""
    G: int
    """Rollouts per prompt (consecutive in the batch)."""
    assignment: str = "contiguous"
    """:data:`ASSIGNMENTS`; verl's ``trainer.balance_batch=True`` is ``verl`` (``balanced``
    balances each update alone, an optimistic stand-in)."""
    sp: int = 1
    """GPUs per data-parallel rank besides TP x PP (Ulysses sequence parallelism: verl's
    ``ulysses_sequence_parallel_size``), so ranks = data-parallel GPUs / ``sp``."""
    mini_batches: int = 1
    """Optimizer updates cut from one call (verl: update call's prompts /
    ``ppo_mini_batch_size``); each waits for its slowest rank."""

    def factor(self, lengths: LengthModel, prompt_tokens: int, dp_gpus: int) -> float:
        """:func:`imbalance_factor` over ``dp_gpus / sp`` ranks (at least 1). Raises
        ValueError as it, or when ``sp < 1`` or does not divide ``dp_gpus``."""
        if self.sp < 1 or dp_gpus % self.sp:
            raise ValueError(f"dp imbalance: sp {self.sp} does not divide {dp_gpus} GPUs")
        ranks = dp_gpus // self.sp
        return imbalance_factor(
            lengths,
            self.sequences,
            ranks,
            self.G,
            prompt_tokens,
            self.assignment,
            sp=self.sp,
            mini_batches=self.mini_batches,
        )
