"""Plain stand-ins for vLLM 0.24.0's output objects, with the documented fields only.

Field names follow ``vllm/outputs.py`` (``RequestOutput``, ``CompletionOutput``),
``vllm/v1/metrics/stats.py`` (``RequestStateStats``: ``arrival_time`` wall clock,
``*_ts`` monotonic) and ``vllm/logprobs.py`` (``Logprob``) of that release.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class RequestStateStats:
    num_generation_tokens: int = 0
    arrival_time: float = 0.0  # time.time()
    queued_ts: float = 0.0  # time.monotonic() from here on
    scheduled_ts: float = 0.0
    first_token_ts: float = 0.0
    last_token_ts: float = 0.0
    first_token_latency: float = 0.0
    is_corrupted: bool = False


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int] | None
    prompt_logprobs: None
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestStateStats | None = None
    num_cached_tokens: int | None = None
    lora_request: None = None
    kv_transfer_params: None = None
    encoder_prompt: None = None
    encoder_prompt_token_ids: None = None
    extra: dict = field(default_factory=dict)


WALL0, MONO0 = 1.76e9, 5000.0
"""A wall-clock epoch time and an unrelated monotonic origin (the clocks differ by ~1.76e9 s)."""


def make_output(
    rid: str,
    prompt: list[int],
    tokens: list[int],
    lps: list[float],
    *,
    arrival_off: float,
    first_off: float,
    last_off: float,
    reason: str = "stop",
    wall0: float = WALL0,
    mono0: float = MONO0,
) -> RequestOutput:
    """A finished ``RequestOutput``: times are offsets (s) from the anchor on each clock."""
    stats = RequestStateStats(
        num_generation_tokens=len(tokens),
        arrival_time=wall0 + arrival_off,
        queued_ts=mono0 + arrival_off,
        scheduled_ts=mono0 + arrival_off,
        first_token_ts=mono0 + first_off,
        last_token_ts=mono0 + last_off,
    )
    comp = CompletionOutput(
        0, "", tokens, sum(lps), [{t: Logprob(lp, 1)} for t, lp in zip(tokens, lps)], reason
    )
    return RequestOutput(rid, None, prompt, None, [comp], True, metrics=stats, num_cached_tokens=0)
