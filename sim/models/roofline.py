"""Roofline cost of one engine worker: a named model on ``tp`` named accelerators.

Decode (memory-bound): every iteration reads all weights once and the KV cache of
every running sequence; each running sequence adds ``2 N`` FLOPs (N active parameters,
:meth:`~sim.models.hardware.ModelConfig.n_active_params`) and each context token
``4 L H d`` attention FLOPs (``L`` layers, ``H`` query heads, ``d`` head dim: ``q.k`` and
``p.v``). Linearised as a sum of the memory and compute terms (an upper bound of the
roofline ``max``, exact when one term dominates), it is the
:class:`~sim.models.cost.LinearCost` decode form ``a_s + b_s n + c_s context``::

    a_s = W / (tp * BW) + iter_overhead_s
    b_s = 2 N / (tp * FLOPS) + W' / (tp * BW)
    c_s = kv_bytes_per_token / (tp * BW) + 4 L H d / (tp * FLOPS)
    prefill_s_per_token = 2 N / (tp * FLOPS * prefill_mfu)

For a dense model ``W`` is all weight bytes and ``W' = 0``. A mixture-of-experts model
reads only the experts its ``n`` sequences touch,
``W(n) = ModelConfig.decode_weight_bytes(n)``, concave in ``n``; the cost kernel is
linear in ``n`` (the engine's closed forms need it), so ``W(n)`` is replaced by its
tangent at ``n0 = decode_batch`` (:class:`RooflineConfig`): ``W' = dW/dn (n0)``,
``W = W(n0) - n0 W'``. Exact at ``n0``, above ``W(n)`` elsewhere (a tangent of a concave
function): at one sequence it overstates the read by up to ``W(n0) / W(1)`` when
``n0`` is large; ``decode_batch = 0`` reads every expert every iteration.

KV capacity (vLLM: ``gpu_memory_utilization`` of each GPU's memory, minus the weights;
activation workspace is ignored, which overstates capacity by a few percent)::

    kv_tokens = (tp * util * memory_bytes - weight_bytes) / kv_bytes_per_token
    kv_blocks = floor(kv_tokens / block_size)

References: Williams et al., "Roofline" (CACM 2009); Kaplan et al. 2020 (2N FLOPs per
token); Kwon et al., "PagedAttention" (SOSP 2023) for blocks and
``gpu_memory_utilization``. Fitted coefficients override these (:func:`roofline_cost`
``override``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from rolloutlab.sim.models.cost import LinearCost
from rolloutlab.sim.models.hardware import Accelerator, ModelConfig, get_gpu, get_model


@dataclass(frozen=True)
class RooflineConfig:
    """One engine worker: a model served by ``tp`` accelerators of one kind."""

    model: ModelConfig
    """The served model (:data:`sim.models.hardware.MODELS`)."""
    gpu: Accelerator
    """The accelerator (:data:`sim.models.hardware.GPUS`)."""
    tp: int = 1
    """Tensor-parallel degree: GPUs in this worker (weights and KV split across them)."""
    gpu_memory_utilization: float = 0.9
    """vLLM ``gpu_memory_utilization``: fraction of each GPU's memory vLLM may use."""
    iter_overhead_s: float = 2e-3
    """Per-iteration constant (scheduler, sampling, kernel launches); an assumption
    (order of vLLM's per-step CPU overhead), to be replaced by a fitted ``a_s``."""
    prefill_mfu: float = 0.5
    """Fraction of peak FLOP/s reached by prefill (assumption; compute-bound GEMMs)."""
    block_size: int = 16
    """KV-cache block size in tokens (vLLM default 16)."""
    decode_batch: int = 0
    """Running sequences at which a mixture-of-experts model's expert reads are
    linearised (module docstring; pass the sequences a replica starts a step with);
    0: every expert read every iteration. No effect on a dense model."""

    def __post_init__(self) -> None:
        if (
            self.tp < 1
            or not (0 < self.gpu_memory_utilization <= 1)
            or not (0 < self.prefill_mfu <= 1)
            or self.decode_batch < 0
        ):
            raise ValueError(
                f"RooflineConfig: need tp >= 1, 0 < gpu_memory_utilization <= 1, "
                f"0 < prefill_mfu <= 1, decode_batch >= 0; got tp={self.tp}, "
                f"util={self.gpu_memory_utilization}, mfu={self.prefill_mfu}, "
                f"decode_batch={self.decode_batch}"
            )
        if self.kv_tokens() < 1:
            raise ValueError(
                f"RooflineConfig: {self.model.name} weights "
                f"({self.model.weight_bytes() / 1e9:.1f} GB) leave no KV memory on "
                f"{self.tp} x {self.gpu.name} at utilization {self.gpu_memory_utilization}"
            )

    def kv_tokens(self) -> int:
        """Tokens of KV cache that fit on this worker (all ``tp`` GPUs)."""
        free = (
            self.tp * self.gpu_memory_utilization * self.gpu.memory_bytes
            - self.model.weight_bytes()
        )
        return int(free // self.model.kv_bytes_per_token())

    def kv_blocks(self) -> int:
        """KV-cache capacity in blocks of :attr:`block_size` tokens."""
        return self.kv_tokens() // self.block_size

    def decode_weight_line(self) -> tuple[float, float]:
        """``(W, W')``: bytes of weights a decode iteration reads, ``W + W' n`` for ``n``
        running sequences (module docstring: all weights and 0 for a dense model or
        ``decode_batch = 0``; else the tangent of the expected expert read at
        ``decode_batch``)."""
        m, n0 = self.model, self.decode_batch
        if not m.is_moe or n0 == 0:
            return float(m.weight_bytes()), 0.0
        # d/dn E (1 - q^n) = -E q^n ln q, q = 1 - k/E, per MoE layer's expert bytes
        q = 1.0 - m.experts_per_token / m.n_experts
        per_expert = m.moe_layers * m.expert_params() * m.dtype_bytes
        slope = per_expert * m.n_experts * -math.log(q) * q**n0 if q > 0 else 0.0
        return m.decode_weight_bytes(n0) - n0 * slope, slope


def roofline(model: str, gpu: str, **kwargs) -> RooflineConfig:
    """:class:`RooflineConfig` of a shipped model and accelerator by name
    (``"qwen2.5-3b"``, ``"h100"``); ``kwargs`` set the other fields. Raises ValueError."""
    return RooflineConfig(get_model(model), get_gpu(gpu), **kwargs)


def roofline_cost(
    cfg: RooflineConfig, override: dict[str, float] | None = None, base: LinearCost | None = None
) -> LinearCost:
    """The decode/prefill :class:`LinearCost` of ``cfg`` (formulas in the module docstring).

    ``base`` supplies the learner and sync fields (kept as they are); ``override`` maps
    any :class:`LinearCost` field to a fitted value, which wins over the roofline.
    """
    m, g, tp = cfg.model, cfg.gpu, cfg.tp
    bw, flops = tp * g.hbm_bytes_per_s, tp * g.bf16_flops
    n = m.n_active_params()
    w, w_per_seq = cfg.decode_weight_line()
    roof = dict(
        a_s=w / bw + cfg.iter_overhead_s,
        b_s=2.0 * n / flops + w_per_seq / bw,
        c_s=m.kv_bytes_per_token() / bw + 4.0 * m.n_layers * m.n_heads * m.head_dim / flops,
        prefill_s_per_token=2.0 * n / (flops * cfg.prefill_mfu),
    )
    cost = replace(base, **roof) if base is not None else LinearCost(**roof)
    return replace(cost, **(override or {}))
