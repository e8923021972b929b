"""Named model and accelerator configurations for the roofline cost (:mod:`sim.models.roofline`).

Model numbers are the fields of each model's public Hugging Face ``config.json``
(``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
``num_key_value_heads``, ``intermediate_size``, ``vocab_size``, ``tie_word_embeddings``);
the parameter count is computed from them (:meth:`ModelConfig.n_params`) and checked
against the model card in ``tests/test_roofline.py``. Accelerator numbers are vendor
spec-sheet values (dense bf16 tensor FLOP/s, i.e. without 2:4 sparsity; HBM bandwidth;
HBM capacity in GB = 1e9 bytes). ``docs/engine.md`` lists the source of every number.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer, as far as time and memory of inference go."""

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

    @property
    def head_dim(self) -> int:
        """Per-head dimension ``hidden_size / n_heads`` (128 for every shipped model)."""
        return self.hidden_size // self.n_heads

    def n_params(self) -> int:
        """Parameter count from the config: embeddings (+ untied LM head), per layer
        ``q, o: h*h``, ``k, v: h * n_kv * head_dim``, MLP ``3 h I``, two RMSNorms, and
        the final norm."""
        h, kv = self.hidden_size, self.n_kv_heads * self.head_dim
        attn = 2 * h * h + 2 * h * kv + ((h + 2 * kv) if self.qkv_bias else 0)
        layer = attn + 3 * h * self.intermediate_size + 2 * h
        emb = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return emb + self.n_layers * layer + h

    def weight_bytes(self) -> int:
        """Bytes of all weights in ``dtype_bytes`` precision."""
        return self.n_params() * self.dtype_bytes

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
