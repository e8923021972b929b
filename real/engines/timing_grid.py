"""The timing grid to measure on an inference engine: what to run, and which cells fit
the engine (no vllm here; the GPU runner is :mod:`real.engines.vllm_grid`, the fit
:mod:`calibration.fits.vllm_grid`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from rolloutlab.sim.models.cost_grid import GridCell


@dataclass(frozen=True)
class GridSpec:
    """The grid to measure (the planner drops cells that do not fit the engine)."""

    running_seqs: tuple[int, ...] = (1, 8, 32, 128)
    """Concurrent sequences ``n`` per cell."""
    prompt_tokens: tuple[int, ...] = (64, 512, 2048)
    """Prompt length ``P`` per request: sets the context the decode iterations read."""
    response_tokens: int = 64
    """Generated tokens ``L`` per request (fixed: ``ignore_eos``, ``min_tokens = max_tokens``)."""
    repeats: int = 2
    """Runs per cell; the median is kept (the first run of the engine is a separate warm-up)."""
    kv_headroom: float = 0.9
    """Share of the KV cache a cell may fill (``n (P + L) <= kv_headroom * kv_tokens``), so no preemption."""

    def __post_init__(self) -> None:
        if (
            not self.running_seqs
            or not self.prompt_tokens
            or min(self.running_seqs) < 1
            or min(self.prompt_tokens) < 1
        ):
            raise ValueError(
                f"GridSpec: need non-empty running_seqs and prompt_tokens >= 1: {self}"
            )
        if self.response_tokens < 2 or self.repeats < 1 or not (0 < self.kv_headroom <= 1):
            raise ValueError(
                f"GridSpec: need response_tokens >= 2, repeats >= 1, 0 < kv_headroom <= 1: {self}"
            )


@dataclass(frozen=True)
class EngineLimits:
    """What the engine allows, read after it started (vLLM's resolved config)."""

    max_num_seqs: int
    max_model_len: int
    kv_cache_tokens: int
    """KV-cache capacity in tokens (``kv_cache_size_tokens``, else ``num_gpu_blocks * block_size``)."""
    max_num_batched_tokens: int
    """Tokens one iteration may process (larger prefills are chunked)."""


def plan_grid(
    spec: GridSpec, limits: EngineLimits
) -> tuple[list[GridCell], list[tuple[GridCell, str]]]:
    """Cells of ``spec`` that fit ``limits``, and the dropped ones with the reason.

    A cell fits when ``n <= max_num_seqs``, ``P + L <= max_model_len``,
    ``n (P + L) <= kv_headroom * kv_cache_tokens`` and ``n P <= max_num_batched_tokens``.
    Order: by ``n`` then ``P`` (deterministic). Raises: ValueError when fewer than 4 cells
    fit (four coefficients are fitted) or fewer than 2 distinct ``n`` or context values.
    """
    kept, dropped = [], []
    for n in sorted(set(spec.running_seqs)):
        for P in sorted(set(spec.prompt_tokens)):
            cell = GridCell(n, P, spec.response_tokens)
            why = []
            if n > limits.max_num_seqs:
                why.append(f"n {n} > max_num_seqs {limits.max_num_seqs}")
            if P + cell.response_tokens > limits.max_model_len:
                why.append(
                    f"P + L {P + cell.response_tokens} > max_model_len {limits.max_model_len}"
                )
            if n * (P + cell.response_tokens) > spec.kv_headroom * limits.kv_cache_tokens:
                why.append(
                    f"n (P + L) {n * (P + cell.response_tokens)} > {spec.kv_headroom} x KV "
                    f"{limits.kv_cache_tokens} tokens"
                )
            if cell.prefill_tokens > limits.max_num_batched_tokens:
                why.append(
                    f"n P {cell.prefill_tokens} > max_num_batched_tokens {limits.max_num_batched_tokens}"
                )
            (dropped.append((cell, "; ".join(why))) if why else kept.append(cell))
    if (
        len(kept) < 4
        or len({c.running_seqs for c in kept}) < 2
        or len({c.prompt_tokens for c in kept}) < 2
    ):
        raise ValueError(
            f"plan_grid: {len(kept)} cells fit the engine ({limits}); need >= 4 with >= 2 "
            f"values of running_seqs and of prompt_tokens. Dropped: "
            f"{[(asdict(c), w) for c, w in dropped][:4]}"
        )
    return kept, dropped
