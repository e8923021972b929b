"""Token sampling: temperature and nucleus (top-p), one uniform draw per sequence.

Each sequence draws its uniform from its own ``torch.Generator`` (seeded per request by
the caller), and the token is the inverse CDF of the truncated distribution at that
uniform. A sequence's tokens therefore depend only on its seed and its logits, not on
which other sequences share the batch: continuous and static batching give the same
tokens (tests/test_real_engine.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How a request's response is sampled."""

    temperature: float = 1.0
    """Softmax temperature; 0 means greedy (argmax)."""
    top_p: float = 1.0
    """Nucleus mass kept (1.0: no truncation)."""
    max_response_length: int = 72
    """Response cap in tokens, EOS included; a response reaching it ends with finish reason ``length``."""

    def __post_init__(self) -> None:
        if self.temperature < 0 or not (0.0 < self.top_p <= 1.0) or self.max_response_length < 1:
            raise ValueError(
                f"SamplingParams: need temperature >= 0, 0 < top_p <= 1, "
                f"max_response_length >= 1; got {self}"
            )


def behaviour_logprobs(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float
) -> torch.Tensor:
    """``log softmax(logits / T)[token]`` ``(N,)`` for logits ``(N, V)`` and tokens ``(N,)``.

    This is the log-probability the learner recomputes (same temperature, no top-p
    truncation, as verl and vLLM report it); for greedy decoding ``T = 1`` is used.
    """
    scale = temperature if temperature > 0 else 1.0
    logp = torch.log_softmax(logits.float() / scale, dim=-1)
    return logp.gather(-1, tokens[:, None]).squeeze(-1)


def sample(logits: torch.Tensor, uniforms: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Tokens ``(N,)`` from logits ``(N, V)`` and per-row uniforms ``(N,)`` in ``[0, 1)``.

    Greedy when ``params.temperature == 0`` (the uniforms are ignored). Otherwise the
    probabilities ``softmax(logits / T)`` are sorted, the smallest prefix holding at
    least ``top_p`` of the mass is kept (always at least one token), and the token is
    the first whose cumulative kept mass exceeds ``u * kept mass``.
    """
    if params.temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)  # (N, V)
    p_sorted, order = probs.sort(dim=-1, descending=True)
    cum = p_sorted.cumsum(dim=-1)
    keep = (cum - p_sorted) < params.top_p  # mass before this token still below top_p
    cum_kept = (p_sorted * keep).cumsum(dim=-1)  # (N, V)
    target = (uniforms.float() * cum_kept[:, -1])[:, None]  # (N, 1)
    idx = torch.searchsorted(cum_kept, target, right=True).clamp(max=probs.shape[-1] - 1)
    return order.gather(-1, idx).squeeze(-1)
