"""Learner cost: a roofline of each part of a training step, named as verl's timing keys.

One step of GRPO/PPO in verl runs, after generation, ``timing_s/old_log_prob`` (a forward
pass of the actor over the batch), ``timing_s/ref`` (the same on the reference model),
``timing_s/update_actor`` (``K`` optimizer updates: forward + backward, gradient
communication, optimizer step) and ``timing_s/update_weights`` (pushing the new weights
to the rollout engines; ``timing_s/reshard`` in colocated runs). :func:`learner_phases`
prices each from the model size, the batch's tokens ``T`` (prompt + response), the GPU
and the trainer's parallel layout (:class:`Layout`: FSDP/ZeRO-3 or TP x PP x DP):

- compute: ``2 N T`` FLOPs for a forward pass, ``6 N T`` for forward + backward
  (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", §2.1; attention FLOPs
  left out, < 5 % at these lengths; ``N`` the active parameters of a mixture of experts,
  :meth:`~sim.models.hardware.ModelConfig.n_active_params`, while memory, collectives
  and the optimizer see all of them), at a fitted fraction ``mfu`` of peak bf16 FLOP/s on
  ``gpus`` GPUs; pipeline parallelism adds the bubble ``(pp - 1) / m`` for ``m``
  micro-batches (Narayanan et al., SC'21, "Efficient Large-Scale Language Model Training
  on GPU Clusters Using Megatron-LM", §2.2.1);
- tensor parallelism: two all-reduces of the activations (``T_dp h`` bf16 values) per
  layer forward and two more backward (Shoeybi et al. 2019, "Megatron-LM", §3);
- data parallelism: a ring all-reduce of the gradients per update (with expert
  parallelism, :attr:`Layout.ep`: the non-expert shard over the ``dp`` replicas, the
  expert shard ``1 / (ep pp)`` over the ``gpus / (ep pp)`` expert replicas, as Megatron
  groups them; the expert all-to-all of tokens is not priced), or with FSDP (ZeRO-3)
  an all-gather of the parameters per forward and per backward and a reduce-scatter of
  the gradients (1.5x the all-reduce volume; Rajbhandari et al., SC'20, "ZeRO", §7);
  a forward-only pass all-gathers once;
- optimizer: Adam reads and writes ``ADAM_BYTES_PER_PARAM`` bytes per parameter, memory
  bound, sharded over every GPU;
- collectives: the ring cost ``2 (n - 1)/n S / bw`` (all-reduce), ``(n - 1)/n S / bw``
  (all-gather, reduce-scatter) plus ``alpha`` per ring step (Thakur, Rabenseifner & Gropp
  2005, "Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1),
  §4); ``bw`` is NVLink within a node, the per-GPU network bandwidth across nodes;
- weight sync (:func:`weight_sync_s`): ``broadcast`` is a chunked, pipelined broadcast
  from the trainer to ``R`` replicas, ``(S + (R - 1) c) / bw + (S / c + R - 1) alpha``
  (Thakur et al. 2005, §4.1, chunks of ``c`` bytes); ``bucketed`` sends ``S / c``
  buckets to each replica in turn from one source, ``R (S / bw + (S / c) alpha)`` (verl
  and slime's bucketed weight transfer, FIELD.md).

Fitted values: ``forward_mfu`` and ``train_mfu`` from verl's TensorBoard logs
(:mod:`calibration.fits.learner_fit`). docs/PAPERS.md lists the sources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rolloutlab.sim.models.hardware import Accelerator, ModelConfig

if TYPE_CHECKING:  # micro_batching imports ring_s from here
    from rolloutlab.sim.models.micro_batching import DynamicBatch

ADAM_BYTES_PER_PARAM = 36
"""Adam traffic per parameter and update: read fp32 master weight, m, v and fp32 gradient
(16 B), write master, m, v (12 B) and the bf16 weight (2 B), plus the bf16 gradient
read when cast (2 B) and its zeroing (4 B): an estimate, memory bound."""

TIMING_KEYS = (
    "timing_s/old_log_prob",
    "timing_s/ref",
    "timing_s/update_actor",
    "timing_s/update_weights",
)
"""The phases :func:`learner_phases` returns, verl's metric names."""


@dataclass(frozen=True)
class Layout:
    """The trainer's GPUs and how the model is split over them."""

    gpus: int
    """Trainer GPUs (``tp * pp * dp``)."""
    tp: int = 1
    """Tensor-parallel degree."""
    pp: int = 1
    """Pipeline-parallel stages."""
    fsdp: bool = True
    """Shard parameters, gradients and optimizer state over the data-parallel group
    (FSDP / ZeRO-3); else plain data parallelism (gradients all-reduced)."""
    micro_batches: int = 8
    """Micro-batches per pipeline flush (only matters with ``pp > 1``)."""
    ep: int = 1
    """Expert-parallel degree: a mixture of experts' routed experts are split over ``ep``
    GPUs of each pipeline stage (expert tensor parallelism 1), the rest over ``tp``;
    plain data parallelism only."""

    def __post_init__(self) -> None:
        if min(self.gpus, self.tp, self.pp, self.micro_batches, self.ep) < 1:
            raise ValueError(f"layout: gpus, tp, pp, micro_batches, ep must be >= 1, got {self}")
        if self.gpus % (self.tp * self.pp):
            raise ValueError(
                f"layout: tp x pp = {self.tp * self.pp} does not divide the {self.gpus} GPUs"
            )
        if self.ep > 1 and (self.fsdp or self.gpus % (self.ep * self.pp)):
            raise ValueError(
                f"layout: expert parallelism needs plain data parallelism and ep x pp = "
                f"{self.ep * self.pp} dividing the {self.gpus} GPUs, got {self}"
            )

    @property
    def dp(self) -> int:
        """Data-parallel degree ``gpus / (tp pp)``."""
        return self.gpus // (self.tp * self.pp)


@dataclass(frozen=True)
class Network:
    """Bandwidths (bytes/s, one direction per GPU) and latency of the trainer's links."""

    nvlink_bytes_per_s: float = 450e9
    """Within a node (H100/H200 NVLink 4: 900 GB/s bidirectional per GPU)."""
    net_bytes_per_s: float = 50e9
    """Across nodes, per GPU (one 400 Gb/s InfiniBand NIC per GPU)."""
    gpus_per_node: int = 8
    alpha_s: float = 10e-6
    """Latency per ring step / message."""

    def __post_init__(self) -> None:
        for name in ("nvlink_bytes_per_s", "net_bytes_per_s", "alpha_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"network: {name} must be a positive finite number, got {v}")
        if self.gpus_per_node < 1:
            raise ValueError(f"network: gpus_per_node must be >= 1, got {self.gpus_per_node}")

    def bandwidth(self, span_gpus: int) -> float:
        """Bytes/s of a collective over ``span_gpus`` consecutive GPUs (NVLink if they fit
        in one node)."""
        return self.nvlink_bytes_per_s if span_gpus <= self.gpus_per_node else self.net_bytes_per_s


def ring_s(kind: str, size_bytes: float, n: int, bw: float, alpha_s: float) -> float:
    """Seconds of a ring collective of ``size_bytes`` over ``n`` GPUs at ``bw`` bytes/s:
    ``all_reduce`` ``2 (n-1)/n S/bw + 2 (n-1) alpha``, ``all_gather`` / ``reduce_scatter``
    ``(n-1)/n S/bw + (n-1) alpha`` (Thakur et al. 2005, §4); 0 for ``n = 1``."""
    if n <= 1:
        return 0.0
    steps = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1}[kind]
    return steps * ((n - 1) / n * size_bytes / bw + (n - 1) * alpha_s)


@dataclass(frozen=True)
class LearnerEfficiency:
    """Fractions of peak bf16 FLOP/s reached (fitted, :mod:`calibration.fits.learner_fit`)."""

    forward_mfu: float = 0.5
    """Forward-only passes (log-probs of actor and reference)."""
    train_mfu: float = 0.35
    """Forward + backward of the actor update."""

    def __post_init__(self) -> None:
        for v in (self.forward_mfu, self.train_mfu):
            if not (0 < v <= 1):
                raise ValueError(f"learner efficiency: an MFU must be in (0, 1], got {v}")


def learner_phases(
    model: ModelConfig,
    gpu: Accelerator,
    layout: Layout,
    tokens: float,
    eff: LearnerEfficiency = LearnerEfficiency(),
    net: Network = Network(),
    updates: int = 1,
    ref: bool = True,
    batching: DynamicBatch | None = None,
) -> dict[str, float]:
    """Seconds of ``timing_s/old_log_prob``, ``timing_s/ref`` and ``timing_s/update_actor``
    for a batch of ``tokens`` tokens (prompt + response, all rollouts of the step) and
    ``updates`` optimizer updates (verl's ``train_batch_size / ppo_mini_batch_size``);
    ``ref=False`` (no KL term) prices the reference pass at 0. ``batching`` (off when
    None; FSDP layouts only) prices the update's collectives per token-budget micro-batch
    over hybrid-sharded FSDP and the optimizer on one shard
    (:class:`sim.models.micro_batching.DynamicBatch`). Formulas in the module docstring.
    Raises ValueError for negative tokens, ``updates < 1``, or ``batching`` with TP, PP
    or plain data parallelism, and as :class:`DynamicBatch`."""
    if not (tokens >= 0) or updates < 1:
        raise ValueError(f"learner: need tokens >= 0 and updates >= 1, got {tokens}, {updates}")
    n, h, L = model.n_active_params(), model.hidden_size, model.n_layers
    g, bubble = layout.gpus, 1.0 + (layout.pp - 1) / layout.micro_batches
    peak = g * gpu.bf16_flops
    bw_tp = net.bandwidth(layout.tp)
    bw_dp = net.bandwidth(layout.gpus)  # the DP group spans the trainer
    act = tokens / layout.dp * h * model.dtype_bytes  # one layer's activations, per replica
    tp_pass = (L / layout.pp) * 2 * ring_s("all_reduce", act, layout.tp, bw_tp, net.alpha_s)
    experts = 0.0
    if layout.ep > 1:  # routed experts, split over ep x pp GPUs
        experts = model.moe_layers * model.n_experts * model.expert_params() * model.dtype_bytes
    shard = (model.weight_bytes() - experts) / (layout.tp * layout.pp)  # bf16 bytes per shard
    if layout.fsdp:
        gather = ring_s("all_gather", shard, layout.dp, bw_dp, net.alpha_s)
        dp_fwd = gather
        dp_update = 2 * gather + ring_s("reduce_scatter", shard, layout.dp, bw_dp, net.alpha_s)
    else:
        dp_fwd, dp_update = 0.0, ring_s("all_reduce", shard, layout.dp, bw_dp, net.alpha_s)
        if experts:
            span = layout.gpus // (layout.ep * layout.pp)  # expert replicas
            dp_update += ring_s(
                "all_reduce", experts / (layout.ep * layout.pp), span, bw_dp, net.alpha_s
            )
    forward = 2.0 * n * tokens / (peak * eff.forward_mfu) * bubble + tp_pass + dp_fwd
    train = 6.0 * n * tokens / (peak * eff.train_mfu) * bubble + 2 * tp_pass
    optimizer = ADAM_BYTES_PER_PARAM * model.n_params() / (g * gpu.hbm_bytes_per_s)
    if batching is not None:
        if layout.tp * layout.pp > 1 or not layout.fsdp:
            raise ValueError(f"learner: dynamic batching is modelled for FSDP alone, got {layout}")
        shard = batching.shard(g)
        per_micro = batching.micro_batch_comm_s(model, g, net.bandwidth(shard), bw_dp, net.alpha_s)
        dp_update = batching.micro_batches(tokens / updates, g) * per_micro
        optimizer = ADAM_BYTES_PER_PARAM * model.n_params() / (shard * gpu.hbm_bytes_per_s)
    return {
        "timing_s/old_log_prob": forward,
        "timing_s/ref": forward if ref else 0.0,
        "timing_s/update_actor": train + updates * (dp_update + optimizer),
    }


WEIGHT_TRANSFERS = ("broadcast", "bucketed")
"""How weights reach the rollout replicas (:func:`weight_sync_s`; `--weight-sync`): one
pipelined broadcast, or bucket by bucket. Distinct from a pipeline's sync mode
(:data:`sim.pipelines.spec.SYNC_MODES`: when the swap happens)."""


def weight_sync_s(
    weight_bytes: float,
    replicas: int,
    bw_bytes_per_s: float,
    mode: str = "broadcast",
    bucket_bytes: float = 512e6,
    alpha_s: float = 1e-3,
) -> float:
    """``timing_s/update_weights`` of a separate placement: ``weight_bytes`` from the
    trainer to ``replicas`` rollout replicas over links of ``bw_bytes_per_s``, in buckets
    (chunks) of ``bucket_bytes``, each message paying ``alpha_s``. ``broadcast``:
    pipelined, ``(S + (R-1) c)/bw + (S/c + R - 1) alpha``; ``bucketed``: one replica after
    another, ``R (S/bw + (S/c) alpha)`` (module docstring). Raises ValueError on a zero,
    negative or NaN bandwidth, bucket or size, ``replicas < 1`` or an unknown mode."""
    if mode not in WEIGHT_TRANSFERS:
        raise ValueError(f"weight sync: mode must be one of {WEIGHT_TRANSFERS}, got {mode!r}")
    for name, v in (("bandwidth", bw_bytes_per_s), ("bucket size", bucket_bytes)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"weight sync: {name} must be a positive finite number, got {v}")
    if not (weight_bytes >= 0 and alpha_s >= 0) or replicas < 1:
        raise ValueError(
            f"weight sync: need bytes >= 0, alpha >= 0, replicas >= 1; got "
            f"{weight_bytes}, {alpha_s}, {replicas}"
        )
    chunks = math.ceil(weight_bytes / bucket_bytes)
    c = min(bucket_bytes, weight_bytes)
    if mode == "broadcast":
        R = replicas
        return (weight_bytes + (R - 1) * c) / bw_bytes_per_s + (chunks + R - 1) * alpha_s
    return replicas * (weight_bytes / bw_bytes_per_s + chunks * alpha_s)
