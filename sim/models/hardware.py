"""Named model and accelerator configurations for the roofline cost (:mod:`sim.models.roofline`).

Model numbers are the fields of each model's public Hugging Face ``config.json``
(``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``num_key_value_heads``, ``intermediate_size``, ``vocab_size``, ``tie_word_embeddings``,
and for a mixture-of-experts model ``head_dim``, ``num_experts``,
``num_experts_per_tok``, ``moe_intermediate_size``); the parameter counts are computed
from them (:meth:`ModelConfig.n_params`, :meth:`ModelConfig.n_active_params`) and checked
against the model cards in ``tests/test_roofline.py`` and ``tests/test_moe_model.py``.
Accelerator numbers are vendor spec-sheet values (dense bf16 tensor FLOP/s, i.e. without
2:4 sparsity; HBM bandwidth; HBM capacity in GB = 1e9 bytes). ``docs/engine.md`` lists
the source of every number.

Mixture of experts (Shazeer et al. 2017, "Outrageously Large Neural Networks"; Fedus et
al. 2022, "Switch Transformers"): each MoE layer holds ``E`` experts (gated MLPs of
``moe_intermediate_size``) and a router (``h x E``); a token passes through ``k`` of them.
Every expert's weights sit in memory (:meth:`ModelConfig.n_params`), a token's FLOPs use
the ``k`` it is routed to (:meth:`ModelConfig.n_active_params`), and a decode iteration
of ``n`` sequences reads the experts its tokens touch: with routing uniform and
independent across tokens, an expert is missed by all ``n`` with probability
``(1 - k/E)^n``, so ``E (1 - (1 - k/E)^n)`` distinct experts per layer are expected
(:meth:`ModelConfig.expected_experts`; real routers are not uniform, which touches fewer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer, dense or mixture of experts, as far as time and memory
    go. Raises ValueError on an inconsistent expert configuration."""

    name: str
    """Hugging Face repository id."""
    hidden_size: int
    """``hidden_size`` (d_model)."""
    n_layers: int
    """``num_hidden_layers``."""
    n_heads: int
    """``num_attention_heads`` (query heads)."""
    n_kv_heads: int
    """``num_key_value_heads`` (GQA): KV cache holds this many heads per layer."""
    intermediate_size: int
    """``intermediate_size`` of the gated MLP (three matrices)."""
    vocab_size: int
    """``vocab_size``."""
    tie_word_embeddings: bool
    """Input embedding and LM head share one matrix."""
    qkv_bias: bool = False
    """Q/K/V projections carry biases (Qwen2 yes, Llama no)."""
    dtype_bytes: int = 2
    """Bytes per weight and per KV element (bf16 = 2)."""
    config_head_dim: int = 0
    """``head_dim`` where the config states one apart from ``hidden_size /
    num_attention_heads`` (Qwen3: 128, where 4096 / 64 = 64); 0: that quotient."""
    qk_norm: bool = False
    """Per-head RMSNorm of queries and keys (Qwen3 ``q_norm``, ``k_norm``: ``2 head_dim``
    weights per layer)."""
    n_experts: int = 0
    """Routed experts per MoE layer (``num_experts``; DeepSeek ``n_routed_experts``);
    0: a dense model."""
    experts_per_token: int = 0
    """Experts a token is routed to (``num_experts_per_tok``)."""
    expert_intermediate_size: int = 0
    """Intermediate size of one routed expert's gated MLP (``moe_intermediate_size``)."""
    shared_expert_intermediate_size: int = 0
    """Intermediate size of the gated MLP every token passes besides its routed experts
    (Qwen2-MoE ``shared_expert_intermediate_size``; DeepSeek ``n_shared_experts x
    moe_intermediate_size``); 0: none (Qwen3-MoE). A scalar gate on it (Qwen2-MoE, ``h``
    weights) is not counted."""
    dense_layers: int = 0
    """Leading layers with the dense MLP of ``intermediate_size`` instead of experts
    (DeepSeek ``first_k_dense_replace``; Qwen3-MoE: 0, ``mlp_only_layers`` empty and
    ``decoder_sparse_step`` 1)."""

    def __post_init__(self) -> None:
        moe = (self.n_experts, self.experts_per_token, self.expert_intermediate_size)
        if any(moe) and not (
            min(moe) >= 1
            and self.experts_per_token <= self.n_experts
            and 0 <= self.dense_layers < self.n_layers
        ):
            raise ValueError(
                f"{self.name}: a mixture of experts needs n_experts >= experts_per_token >= 1, "
                f"expert_intermediate_size >= 1 and 0 <= dense_layers < n_layers; got "
                f"n_experts={self.n_experts}, experts_per_token={self.experts_per_token}, "
                f"expert_intermediate_size={self.expert_intermediate_size}, "
                f"dense_layers={self.dense_layers} of {self.n_layers}"
            )

    @property
    def head_dim(self) -> int:
        """Per-head dimension: :attr:`config_head_dim`, else ``hidden_size / n_heads``
        (128 for every shipped model)."""
        return self.config_head_dim or self.hidden_size // self.n_heads

    @property
    def is_moe(self) -> bool:
        """A mixture-of-experts model (``n_experts > 0``)."""
        return self.n_experts > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is routed experts (0 for a dense model)."""
        return self.n_layers - self.dense_layers if self.is_moe else 0

    def expert_params(self) -> int:
        """Parameters of one routed expert: a gated MLP, ``3 h I_expert``."""
        return 3 * self.hidden_size * self.expert_intermediate_size

    def _params(self, experts: int) -> int:
        """Parameters counting ``experts`` routed experts per MoE layer: embeddings (+ untied
        LM head), per layer ``q: h * H d``, ``o: H d * h``, ``k, v: h * n_kv d`` (+ Q/K/V
        biases, + ``2 d`` of q/k norms), two RMSNorms, and the MLP: dense ``3 h I``, or
        the router ``h E``, the experts and the shared expert ``3 h I_shared``; the final
        norm."""
        h, q, kv = self.hidden_size, self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        attn = 2 * h * q + 2 * h * kv + ((q + 2 * kv) if self.qkv_bias else 0)
        attn += 2 * self.head_dim if self.qk_norm else 0
        dense_mlp = 3 * h * self.intermediate_size
        moe_mlp = (
            h * self.n_experts
            + experts * self.expert_params()
            + 3 * h * self.shared_expert_intermediate_size
        )
        layers = (self.n_layers - self.moe_layers) * (attn + dense_mlp + 2 * h)
        layers += self.moe_layers * (attn + moe_mlp + 2 * h)
        emb = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return emb + layers + h

    def n_params(self) -> int:
        """Parameter count from the config, every expert included (:meth:`_params`)."""
        return self._params(self.n_experts)

    def n_active_params(self) -> int:
        """Parameters a token passes through: :meth:`n_params` with ``experts_per_token``
        routed experts per MoE layer (the router counted whole); :meth:`n_params` for a
        dense model. FLOPs per token are ``2 x`` this forward (Kaplan et al. 2020)."""
        return self._params(self.experts_per_token)

    def expected_experts(self, tokens: float) -> float:
        """Expected distinct experts of one MoE layer that ``tokens`` tokens touch, each
        routed to ``k`` of ``E`` uniformly and independently: ``E (1 - (1 - k/E)^n)``
        (module docstring). 0 for a dense model. Raises ValueError on negative tokens."""
        if not tokens >= 0:
            raise ValueError(f"{self.name}: tokens must be >= 0, got {tokens}")
        if not self.is_moe:
            return 0.0
        E, k = self.n_experts, self.experts_per_token
        return E * -math.expm1(tokens * math.log1p(-k / E)) if k < E else float(E) * (tokens > 0)

    def weight_bytes(self) -> int:
        """Bytes of all weights in ``dtype_bytes`` precision."""
        return self.n_params() * self.dtype_bytes

    def decode_weight_bytes(self, tokens: float) -> float:
        """Expected bytes of weights one forward step over ``tokens`` tokens reads: every
        weight but the routed experts, plus :meth:`expected_experts` experts per MoE layer;
        :meth:`weight_bytes` for a dense model. Raises ValueError on negative tokens."""
        routed = self.moe_layers * self.expert_params() * self.dtype_bytes
        touched = routed * self.expected_experts(tokens)
        return self.weight_bytes() - routed * self.n_experts + touched

    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes of one token: ``2 (K and V) * layers * kv_heads * head_dim * dtype``."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.dtype_bytes


@dataclass(frozen=True)
class Accelerator:
    """One accelerator (GPU) as the roofline sees it."""

    name: str
    """Product name (SXM form factor where there are several)."""
    hbm_bytes_per_s: float
    """Peak HBM bandwidth (bytes/s)."""
    bf16_flops: float
    """Peak dense bf16 tensor throughput (FLOP/s), no sparsity."""
    memory_bytes: float
    """HBM capacity (bytes; spec-sheet GB = 1e9 bytes)."""


MODELS: dict[str, ModelConfig] = {
    # huggingface.co/Qwen/Qwen2.5-3B/blob/main/config.json
    "qwen2.5-3b": ModelConfig("Qwen/Qwen2.5-3B", 2048, 36, 16, 2, 11008, 151936, True, True),
    # huggingface.co/meta-llama/Llama-3.2-3B/blob/main/config.json
    "llama-3.2-3b": ModelConfig("meta-llama/Llama-3.2-3B", 3072, 28, 24, 8, 8192, 128256, True),
    # huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json
    "qwen2.5-7b": ModelConfig("Qwen/Qwen2.5-7B", 3584, 28, 28, 4, 18944, 152064, False, True),
    # huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json (head dim 4096 / 32 = 128)
    "llama-3-8b": ModelConfig("meta-llama/Meta-Llama-3-8B", 4096, 32, 32, 8, 14336, 128256, False),
    # huggingface.co/deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B/blob/main/config.json (the
    # Qwen2.5-Math-1.5B architecture; AReaL's 1.5B runs, docs/PAPERS.md)
    "r1-distill-qwen-1.5b": ModelConfig(
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", 1536, 28, 12, 2, 8960, 151936, False, True
    ),
    # huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json (as NVIDIA-NeMo/Megatron-Bridge
    # src/megatron/bridge/models/qwen/qwen_provider.py, Qwen3MoEModelProvider235B_A22B, states
    # it): head_dim 128, q/k norms, no QKV bias, 128 experts, 8 per token, every layer MoE
    "qwen3-235b-a22b": ModelConfig(
        "Qwen/Qwen3-235B-A22B",
        4096,
        94,
        64,
        4,
        12288,
        151936,
        False,
        config_head_dim=128,
        qk_norm=True,
        n_experts=128,
        experts_per_token=8,
        expert_intermediate_size=1536,
    ),
    # huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json (Megatron-Bridge's
    # Qwen3MoEModelProvider30B_A3B states the same)
    "qwen3-30b-a3b": ModelConfig(
        "Qwen/Qwen3-30B-A3B",
        2048,
        48,
        32,
        4,
        6144,
        151936,
        False,
        config_head_dim=128,
        qk_norm=True,
        n_experts=128,
        experts_per_token=8,
        expert_intermediate_size=768,
    ),
}

GPUS: dict[str, Accelerator] = {
    # NVIDIA H100 Tensor Core GPU datasheet, SXM5: 3.35 TB/s, 989 TFLOPS bf16 dense, 80 GB
    "h100": Accelerator("H100 SXM5 80GB", 3.35e12, 989e12, 80e9),
    # NVIDIA H200 datasheet, SXM: 4.8 TB/s, 989 TFLOPS bf16 dense, 141 GB
    "h200": Accelerator("H200 SXM 141GB", 4.8e12, 989e12, 141e9),
    # NVIDIA A100 datasheet, SXM4 80GB: 2,039 GB/s, 312 TFLOPS bf16 dense, 80 GB
    "a100": Accelerator("A100 SXM4 80GB", 2.039e12, 312e12, 80e9),
    # NVIDIA HGX H20 (China-market Hopper), widely reported spec: 4.0 TB/s, 148 TFLOPS
    # bf16 dense, 96 GB HBM3 (no public NVIDIA datasheet; see docs/engine.md)
    "h20": Accelerator("H20 96GB", 4.0e12, 148e12, 96e9),
    # NVIDIA H800 SXM5 (China-market Hopper, the H100's GH100 die): the H100 SXM5's
    # 3.35 TB/s HBM3, 989 TFLOPS bf16 dense, 80 GB; NVLink cut to 400 GB/s (900 on the
    # H100) and FP64 cut, neither in this table. Widely reported spec (e.g. philisun.com,
    # "NVIDIA H800 vs H100"); no NVIDIA datasheet checked (docs/engine.md)
    "h800": Accelerator("H800 SXM5 80GB", 3.35e12, 989e12, 80e9),
}


def _lookup(table: dict, kind: str, name: str):
    try:
        return table[name.lower()]
    except KeyError:
        raise ValueError(f"unknown {kind} {name!r}; known: {', '.join(table)}") from None


def get_model(name: str) -> ModelConfig:
    """The shipped :class:`ModelConfig` named ``name`` (case-insensitive).

    Raises: ValueError naming the known models.
    """
    return _lookup(MODELS, "model", name)


def get_gpu(name: str) -> Accelerator:
    """The shipped :class:`Accelerator` named ``name`` (case-insensitive).

    Raises: ValueError naming the known accelerators.
    """
    return _lookup(GPUS, "accelerator", name)
