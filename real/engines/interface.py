"""The rollout engine interface (docs/DESIGN.md "rollout engine") and what it hands on.

:class:`RolloutEngine`: ``generate(requests, params)`` runs a step's requests to completion
and returns one :class:`RolloutResult` each, with its timestamps; ``update_weights(state_dict,
version)`` installs new policy weights. :class:`real.engines.torch_engine.TorchEngine` and
:class:`real.engines.vllm_engine.VllmEngine` implement it; per-request seeds and ``logprobs``
are what vLLM's ``SamplingParams(seed=..., logprobs=0)`` give. :func:`check_fits` is the one
rule both apply before generating: a prompt plus the response cap fits the model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from rolloutlab.real.engines.sampling import SamplingParams

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class RolloutRequest:
    """One completion to generate."""

    request_id: int
    """Caller's id; results come back in request order whatever the finish order."""
    prompt_ids: tuple[int, ...]
    """Prompt token ids (BOS included)."""
    seed: int
    """Seed of this request's sampling generator (same seed, same tokens)."""
    tool: Callable[[list[int]], tuple[list[int], float]] | None = field(default=None, compare=False)
    """Multi-turn requests: ``tool(response_ids) -> (output ids, latency s)``, called when
    the model samples the tool token (:mod:`real.engines.tool_turns`); None: one turn."""


@dataclass
class RolloutResult:
    """A finished rollout: tokens, behaviour log-probs and timestamps (s from run start)."""

    request_id: int
    prompt_tokens: int
    response_ids: list[int] = field(default_factory=list)
    """Sampled tokens, EOS included when the rollout stopped."""
    logprobs: list[float] = field(default_factory=list)
    """Behaviour log-prob of each sampled token (:func:`real.engines.sampling.behaviour_logprobs`)."""
    finish_reason: str = ""
    """``"stop"`` (sampled EOS) or ``"length"`` (hit ``max_response_length``)."""
    t_submit_s: float = 0.0
    t_first_token_s: float = 0.0
    t_finish_s: float = 0.0
    worker: int = 0
    """Engine replica index."""
    policy_version: int = 0
    """Weights version that generated the rollout."""
    t_scheduled_s: float | None = None
    """When the engine first scheduled it (s from run start; vLLM's ``scheduled_ts``; None: not reported)."""
    preemptions: int | None = None
    """Times the engine preempted it (vLLM's ``num_preemptions``; None: not reported)."""
    cached_prompt_tokens: int | None = None
    """Prompt tokens served from the prefix cache (vLLM's ``num_cached_tokens``; None: not reported)."""
    tool_mask: list[bool] = field(default_factory=list)
    """Multi-turn requests: per response token, True on a tool's output (not sampled:
    its log-prob is 0 and the learner masks it out); empty for one-turn requests."""
    turns: list[dict] = field(default_factory=list)
    """Multi-turn requests: one dict per model turn (:mod:`real.engines.tool_turns`)."""


class RolloutEngine(Protocol):
    """What the synchronous and asynchronous loops need from a generator (torch, vLLM)."""

    capacity: int
    """Most sequences generated concurrently (vLLM's ``max_num_seqs``)."""
    policy_version: int

    def generate(
        self, requests: Sequence[RolloutRequest], params: SamplingParams
    ) -> list[RolloutResult]:
        """Generate every request; results in request order."""

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Install policy weights (HF parameter names) as ``version``."""


def check_fits(
    requests: Sequence[RolloutRequest], max_response_length: int, max_len: int, limit: str
) -> None:
    """Refuse a step whose prompt plus ``max_response_length`` exceeds the model's context
    ``max_len`` (``limit`` names it: ``max_position_embeddings``, vLLM's ``max_model_len``).

    Raises: ValueError naming the first request that does not fit.
    """
    for r in requests:
        if len(r.prompt_ids) + max_response_length > max_len:
            raise ValueError(
                f"request {r.request_id}: prompt of {len(r.prompt_ids)} tokens + "
                f"max_response_length {max_response_length} exceeds {limit} {max_len}"
            )
