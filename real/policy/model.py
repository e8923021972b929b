"""A compact Llama causal LM in torch, with Hugging Face parameter names and a per-slot KV cache.

References: Touvron et al. 2023 (Llama: RMSNorm, rotary embeddings, SwiGLU), Ainslie et al.
2023 (grouped-query attention); the forward follows transformers' ``LlamaForCausalLM``
(``rotate_half`` RoPE convention), so :func:`save_pretrained` writes a directory
(``config.json`` + ``model.safetensors``) that transformers and vLLM load as is, and
``tests/test_real_model.py`` checks the logits against transformers when it is installed.

Two entry points: :meth:`LlamaLM.forward` (full sequences, causal, for the learner) and
:meth:`LlamaLM.forward_cached` (writes keys/values of new tokens into a :class:`KVCache`
at per-slot positions and attends over each slot's own past: prefill and decode of a
continuously batched engine).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

CONFIG_DIR = Path(__file__).parents[1] / "configs" / "tiny_llama"


@dataclass(frozen=True)
class LlamaConfig:
    """The subset of a Hugging Face ``LlamaConfig`` this model implements."""

    vocab_size: int = 192
    """Tokens in the vocabulary (>= :data:`real.tasks.tokenizer.VOCAB_SIZE`)."""
    hidden_size: int = 128
    """Residual stream width."""
    intermediate_size: int = 256
    """SwiGLU hidden width."""
    num_hidden_layers: int = 2
    """Decoder layers."""
    num_attention_heads: int = 4
    """Query heads."""
    num_key_value_heads: int = 2
    """Key/value heads (GQA: each serves ``num_attention_heads / num_key_value_heads`` query heads)."""
    head_dim: int = 32
    """Width of one head."""
    max_position_embeddings: int = 128
    """Longest prompt + response the cache is sized for."""
    rms_norm_eps: float = 1e-5
    """RMSNorm epsilon."""
    rope_theta: float = 10000.0
    """RoPE base."""
    tie_word_embeddings: bool = False
    """The output layer shares the token embedding's weight (``lm_head.weight`` is
    ``model.embed_tokens.weight``; SmolLM2 does this, the tiny model does not)."""

    @classmethod
    def from_json(cls, path: str | Path) -> LlamaConfig:
        """Read a Hugging Face ``config.json`` (unknown keys ignored).

        The RoPE base is read from ``rope_theta`` or, as transformers 5 writes it, from
        ``rope_parameters.rope_theta``; ``tie_word_embeddings`` defaults to False.
        Raises: ValueError naming the file if it is not a Llama config, lacks a key, or
        asks for RoPE scaling or attention biases (not implemented here).
        """
        path = Path(path)
        raw = json.loads(path.read_text())
        if raw.get("model_type") != "llama":
            raise ValueError(f"{path}: model_type {raw.get('model_type')!r}, expected 'llama'")
        rope = raw.get("rope_parameters") or {}
        if raw.get("rope_scaling") or rope.get("rope_type", "default") != "default":
            raise ValueError(f"{path}: RoPE scaling is not implemented by real.policy.model")
        if raw.get("attention_bias"):
            raise ValueError(f"{path}: attention_bias is not implemented by real.policy.model")
        raw = {"tie_word_embeddings": False, **raw}
        if "rope_theta" not in raw and "rope_theta" in rope:
            raw["rope_theta"] = rope["rope_theta"]
        names = {f.name for f in fields(cls)}
        missing = sorted(names - raw.keys())
        if missing:
            raise ValueError(f"{path}: missing key(s) {missing}")
        return cls(**{k: raw[k] for k in names})


def load_config(path: str | Path = CONFIG_DIR / "config.json") -> LlamaConfig:
    """The model config kept in the repo (or another HF Llama ``config.json``)."""
    return LlamaConfig.from_json(path)


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * weight``, computed in float32 as transformers does."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., hidden)`` -> the same shape, RMS-normalised and scaled."""
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos/sin tables ``(N, T, head_dim)`` for integer ``positions`` ``(N, T)``."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    freqs = positions.float()[..., None] * inv_freq  # (N, T, head_dim / 2)
    emb = torch.cat([freqs, freqs], dim=-1)  # (N, T, head_dim)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``(N, H, T, D)`` by the tables ``(N, T, D)`` (``rotate_half`` convention)."""
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return x * cos[:, None] + rotated * sin[:, None]


@dataclass
class KVCache:
    """Keys and values of every layer for ``n_slots`` sequences of up to ``max_len`` tokens.

    ``k[layer]``, ``v[layer]``: ``(n_slots, n_kv_heads, max_len, head_dim)``. A slot's
    entries at positions ``>= its length`` are garbage and never attended to.
    """

    k: list[torch.Tensor]
    v: list[torch.Tensor]

    @classmethod
    def empty(cls, cfg: LlamaConfig, n_slots: int, max_len: int, dtype=torch.float32) -> KVCache:
        """A zero cache."""
        shape = (n_slots, cfg.num_key_value_heads, max_len, cfg.head_dim)
        return cls(
            [torch.zeros(shape, dtype=dtype) for _ in range(cfg.num_hidden_layers)],
            [torch.zeros(shape, dtype=dtype) for _ in range(cfg.num_hidden_layers)],
        )


class Attention(nn.Module):
    """Grouped-query self-attention with rotary embeddings."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        h, d, kv = cfg.num_attention_heads, cfg.head_dim, cfg.num_key_value_heads
        self.q_proj = nn.Linear(cfg.hidden_size, h * d, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, kv * d, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, cfg.hidden_size, bias=False)

    def forward(self, x, cos, sin, mask, cache=None, slots=None, positions=None):
        """``x`` ``(N, T, hidden)``; ``mask`` ``(N, 1, T, K)`` bool (True = attend).

        Without a cache the keys are the ``T`` tokens of ``x``; with one, the new keys
        are written at ``(slots, positions)`` and ``K`` past positions of each slot are read.
        """
        n, t, _ = x.shape
        c = self.cfg
        q = self.q_proj(x).view(n, t, c.num_attention_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(n, t, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(n, t, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)  # (N, H, T, D), (N, KV, T, D)
        if cache is not None:
            ck, cv = cache
            # advanced indices (N,1) and (N,T) around a slice: the target is (N, T, KV, D)
            ck[slots[:, None], :, positions] = k.transpose(1, 2)
            cv[slots[:, None], :, positions] = v.transpose(1, 2)
            k, v = ck[slots, :, : mask.shape[-1]], cv[slots, :, : mask.shape[-1]]  # (N, KV, K, D)
        rep = c.num_attention_heads // c.num_key_value_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (N, H, T, D)
        return self.o_proj(y.transpose(1, 2).reshape(n, t, -1))


class MLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, hidden)`` -> ``(B, T, hidden)``: SwiGLU feed-forward."""
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm attention block then pre-norm MLP block, both residual."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, mask, cache=None, slots=None, positions=None):
        """One pre-norm decoder block (attention then MLP, residual each); same shapes in and out."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, slots, positions)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBody(nn.Module):
    """transformers' ``LlamaModel``: embeddings, decoder layers, final norm."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaLM(nn.Module):
    """transformers' ``LlamaForCausalLM`` (same parameter names: ``model.*``, ``lm_head``)."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.model = LlamaBody(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def init_weights(self, generator: torch.Generator, std: float = 0.02) -> None:
        """Normal(0, std) linear/embedding weights, unit norms (transformers' init)."""
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("layernorm.weight") or name == "model.norm.weight":
                    p.fill_(1.0)
                else:
                    p.normal_(0.0, std, generator=generator)

    def _run(self, ids, positions, mask, cache=None, slots=None):
        x = self.model.embed_tokens(ids)  # (N, T, hidden)
        cos, sin = rope_cos_sin(positions, self.cfg.head_dim, self.cfg.rope_theta, x.dtype)
        for i, layer in enumerate(self.model.layers):
            kv = None if cache is None else (cache.k[i], cache.v[i])
            x = layer(x, cos, sin, mask, kv, slots, positions)
        return self.lm_head(self.model.norm(x))  # (N, T, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits ``(N, T, vocab)`` of right-padded sequences ``ids`` ``(N, T)`` (causal)."""
        n, t = ids.shape
        positions = torch.arange(t).expand(n, t)
        mask = torch.ones(t, t, dtype=torch.bool).tril()[None, None]  # (1, 1, T, T)
        return self._run(ids, positions, mask)

    def forward_cached(
        self, ids: torch.Tensor, slots: torch.Tensor, start: torch.Tensor, cache: KVCache
    ) -> torch.Tensor:
        """Run ``ids`` ``(N, T)`` at positions ``start[i] + 0..T-1`` of cache slots ``slots`` ``(N,)``.

        Writes their keys/values into ``cache``; each token attends to its slot's
        positions ``<=`` its own. Returns logits ``(N, T, vocab)``.
        Raises: ValueError if a position would pass the cache's ``max_len``.
        """
        n, t = ids.shape
        positions = start[:, None] + torch.arange(t)  # (N, T)
        k_len = int(positions.max()) + 1
        if k_len > cache.k[0].shape[2]:
            raise ValueError(
                f"forward_cached: position {k_len - 1} is past the cache length "
                f"{cache.k[0].shape[2]}"
            )
        mask = torch.arange(k_len)[None, None, None, :] <= positions[:, None, :, None]  # (N,1,T,K)
        return self._run(ids, positions, mask, cache, slots)


def build_model(cfg: LlamaConfig, seed: int) -> LlamaLM:
    """A randomly initialised model (seeded, independent of the global RNG)."""
    model = LlamaLM(cfg)
    model.init_weights(torch.Generator().manual_seed(seed))
    return model


def save_pretrained(
    model: LlamaLM, out_dir: str | Path, src_config: Path = CONFIG_DIR / "config.json"
) -> None:
    """Write ``config.json`` (the HF config the model was built from) and ``model.safetensors``.

    A tied output layer is not written (safetensors refuses shared storage; transformers
    and vLLM tie it again from ``tie_word_embeddings``).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = json.loads(Path(src_config).read_text())
    raw.update({f.name: getattr(model.cfg, f.name) for f in fields(model.cfg)})
    (out_dir / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    tensors = {
        k: v.detach().contiguous()
        for k, v in model.state_dict().items()
        if k not in tied_names(model.cfg)
    }
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})


def tied_names(cfg: LlamaConfig) -> tuple[str, ...]:
    """State-dict names that alias another tensor (``lm_head.weight`` when tied): not
    written to disk, and not sent in a weight sync."""
    return ("lm_head.weight",) if cfg.tie_word_embeddings else ()


def load_pretrained(model_dir: str | Path) -> LlamaLM:
    """Load a directory written by :func:`save_pretrained` (or by transformers).

    Raises: ValueError naming the file when the config or weights are unreadable or
    do not match (missing/unexpected tensor names, wrong shapes).
    """
    model_dir = Path(model_dir)
    model = LlamaLM(LlamaConfig.from_json(model_dir / "config.json"))
    path = model_dir / "model.safetensors"
    try:
        tensors = load_file(str(path))
        for name in tied_names(model.cfg):
            tensors.setdefault(name, tensors["model.embed_tokens.weight"])
        model.load_state_dict(tensors, strict=True)
    except Exception as exc:  # safetensors and torch raise several types
        raise ValueError(f"{path}: cannot load weights: {exc}") from None
    return model


def n_params(model: nn.Module) -> int:
    """Number of parameters."""
    return sum(p.numel() for p in model.parameters())
