"""Token-budget micro-batches and hybrid-sharded FSDP: the per-update communication of a
trainer as verl's FSDP workers run it with ``use_dynamic_bsz``.

:func:`sim.models.learner_cost.learner_phases` prices one parameter all-gather forward,
one backward and one gradient reduce-scatter per optimizer update, over every trainer GPU.
verl's FSDP actor (``verl/workers/actor/dp_actor.py``, ``update_policy``) instead runs
each update's mini-batch as several micro-batches and calls ``backward`` on each without
suspending gradient synchronisation, so FSDP gathers the parameters and reduces the
gradients once **per micro-batch**; with ``fsdp_size`` below the trainer's GPU count
(``verl/workers/fsdp_workers.py``, ``create_device_mesh``) the model is sharded over
groups of ``fsdp_size`` GPUs and replicated across them (hybrid sharding, HSDP), and each
micro-batch's gradient shard is also all-reduced across the replicas. :class:`DynamicBatch`
prices that:

- micro-batches per update: with ``use_dynamic_bsz`` a data-parallel rank (``sp`` GPUs
  of one Ulysses sequence-parallel group) packs its share of the update's tokens into
  micro-batches of at most ``ppo_max_token_len_per_gpu x sp`` tokens,
  ``m = max(1, ceil(T / (ranks budget)))`` (``verl/utils/seqlen_balancing.py``,
  ``rearrange_micro_batches``: ``ceil(total tokens / max tokens)``, then the maximum over
  the data-parallel ranks; the balanced batch makes the ranks' shares equal here);
- per micro-batch: two all-gathers of the bf16 weights and a reduce-scatter of the
  gradients in ``reduce_bytes`` per parameter (verl's default ``reduce_dtype`` is fp32)
  within a shard group, then a ring all-reduce of one shard's gradients across the
  ``gpus / shard`` replicas (ZeRO-3 volumes, Rajbhandari et al., SC'20, §7; ring costs,
  Thakur et al. 2005, §4; hybrid sharding: Zhao et al. 2023, "PyTorch FSDP: Experiences on
  Scaling Fully Sharded Data Parallel", PVLDB 16(12), §3.2);
- the optimizer step updates a shard of ``1 / shard`` of the parameters on every GPU,
  so it does not shrink past the shard group.

A micro-batch's compute is proportional to its tokens, so the count changes only the
communication: more micro-batches, more collectives. docs/PAPERS.md §4 lists the sources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rolloutlab.sim.models.hardware import ModelConfig
from rolloutlab.sim.models.learner_cost import ring_s


@dataclass(frozen=True)
class DynamicBatch:
    """A trainer's micro-batching and sharding (verl: ``use_dynamic_bsz=True``)."""

    max_tokens_per_gpu: float
    """Token budget of a micro-batch per GPU (verl ``ppo_max_token_len_per_gpu``)."""
    sp: int = 1
    """GPUs per data-parallel rank (verl ``ulysses_sequence_parallel_size``)."""
    shard_gpus: int = 0
    """GPUs a model copy is sharded over (verl ``fsdp_size``); 0: every trainer GPU."""
    reduce_bytes: int = 4
    """Bytes per gradient value in the reduction (verl's FSDP ``reduce_dtype``, fp32)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.max_tokens_per_gpu) and self.max_tokens_per_gpu > 0):
            raise ValueError(
                f"dynamic batch: max_tokens_per_gpu must be a positive finite number, got "
                f"{self.max_tokens_per_gpu}"
            )
        if self.sp < 1 or self.shard_gpus < 0 or self.reduce_bytes < 1:
            raise ValueError(
                f"dynamic batch: need sp >= 1, shard_gpus >= 0, reduce_bytes >= 1, got {self}"
            )

    def shard(self, gpus: int) -> int:
        """GPUs of one shard group on a ``gpus``-GPU trainer (``shard_gpus``, or ``gpus`` when
        0 or larger, as verl's ``create_device_mesh``). Raises ValueError when it does not
        divide ``gpus``."""
        s = gpus if self.shard_gpus == 0 or self.shard_gpus >= gpus else self.shard_gpus
        if gpus % s:
            raise ValueError(f"dynamic batch: fsdp size {s} does not divide {gpus} GPUs")
        return s

    def micro_batches(self, tokens_per_update: float, gpus: int) -> int:
        """Micro-batches each data-parallel rank runs for one update of ``tokens_per_update``
        tokens (all ranks together) on ``gpus`` GPUs: ``max(1, ceil(T / (ranks sp
        budget)))``. Raises ValueError on negative tokens or ``sp`` not dividing ``gpus``."""
        if not tokens_per_update >= 0:
            raise ValueError(f"dynamic batch: tokens must be >= 0, got {tokens_per_update}")
        if gpus < 1 or gpus % self.sp:
            raise ValueError(f"dynamic batch: sp {self.sp} does not divide {gpus} GPUs")
        per_rank = tokens_per_update / (gpus // self.sp)
        return max(1, math.ceil(per_rank / (self.sp * self.max_tokens_per_gpu)))

    def micro_batch_comm_s(
        self, model: ModelConfig, gpus: int, shard_bw: float, replica_bw: float, alpha_s: float
    ) -> float:
        """Seconds of one micro-batch's FSDP collectives (module docstring): weights
        gathered twice and gradients reduce-scattered within a shard group at
        ``shard_bw`` bytes/s, a shard's gradients all-reduced across replicas at
        ``replica_bw``."""
        s = self.shard(gpus)
        weights = model.weight_bytes()
        grads = weights / model.dtype_bytes * self.reduce_bytes
        within = 2 * ring_s("all_gather", weights, s, shard_bw, alpha_s)
        within += ring_s("reduce_scatter", grads, s, shard_bw, alpha_s)
        return within + ring_s("all_reduce", grads / s, gpus // s, replica_bw, alpha_s)
