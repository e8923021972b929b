"""Configuration of the simulated generation side: workers, slots, dispatch, KV cache.

Kept apart from :mod:`sim.engine.core` so that the engine, its workers (:mod:`sim.engine.paged_worker`),
the reference loops and the fast path all read one config without importing each
other.
"""

from __future__ import annotations

from dataclasses import dataclass

from rolloutlab.sim.engine.dispatch import HELD_DISPATCH, parse_dispatch
from rolloutlab.sim.engine.speculative import SpeculativeDecoding

DISPATCH = ("round_robin", "least_loaded", "group", "shared", "deferred:T")
"""Dispatch rules: the first three assign a worker at submit (:mod:`sim.engine.schedule`), the
last two hold requests at the engine (:mod:`sim.engine.dispatch`)."""


@dataclass(frozen=True)
class EngineConfig:
    """Generation side of the simulated cluster."""

    n_workers: int = 1
    """Engine replicas (a tensor-parallel group counts as one worker)."""
    max_num_seqs: int = 256
    """vLLM ``max_num_seqs``: most sequences running at once on one worker."""
    dispatch: str = "group"
    """``round_robin`` (rollout i -> worker i mod W), ``least_loaded`` (fewest outstanding
    requests at submit), ``group`` (a prompt's whole group on one worker, as vLLM does
    with ``n=G``; groups round-robin), ``shared`` (one queue at the engine hands each
    free slot the next request) or ``deferred:T`` (as shared, at most T requests waiting
    for a slot on a worker); :mod:`sim.engine.dispatch`."""
    prefix_caching: bool = True
    """Samples of one prompt on one worker share its prefill (and, with ``kv_blocks``,
    the prompt's full KV blocks)."""
    kv_blocks: int | None = None
    """KV-cache capacity per worker in blocks of ``block_size`` tokens (e.g.
    :meth:`sim.models.roofline.RooflineConfig.kv_blocks`); ``None`` = unlimited (no KV
    pressure). When set, workers are :class:`sim.engine.paged_worker.PagedWorker` (preemption by
    recompute)."""
    block_size: int = 16
    """KV block size in tokens (vLLM default 16)."""
    gpu_memory_utilization: float = 0.9
    """vLLM ``gpu_memory_utilization`` (default 0.9): the share of each GPU's memory the
    engine may use; with a roofline model (``--model --gpu``) it sets ``kv_blocks``
    (:meth:`sim.models.roofline.RooflineConfig.kv_blocks`), otherwise it is not used."""
    max_num_batched_tokens: int | None = None
    """vLLM ``max_num_batched_tokens``: tokens per iteration (one per decoding sequence +
    prefill chunk tokens); longer prefills are chunked. ``None`` = unlimited. Must be
    >= ``max_num_seqs`` (as vLLM requires)."""
    chunked_prefill: bool = True
    """vLLM ``enable_chunked_prefill``: a prefill longer than the token budget left is
    split across iterations. Off, admission stops at the first queued request whose
    prefill exceeds the budget left (vLLM v1 ``Scheduler.schedule``, waiting loop)."""
    recompute_partial_block: bool = False
    """Paged engine, prefix caching: a group mate recomputes its cached prompt's partial
    last block, as vLLM v1 does (it hits full blocks only). Off (the default, what the
    unpaged engine and the fast path model): a cached prompt costs no prefill."""
    speculative: SpeculativeDecoding | None = None
    """Speculative decoding on every worker (:mod:`sim.engine.speculative`); synchronous
    pipelines only, on the slot engine, the fast path or with KV blocks
    (:mod:`sim.engine.speculative_paged_lane`); not with a token budget or held dispatch."""

    def __post_init__(self) -> None:
        if self.n_workers < 1 or self.max_num_seqs < 1:
            raise ValueError(f"EngineConfig: need n_workers >= 1 and max_num_seqs >= 1: {self}")
        parse_dispatch(self.dispatch)  # ValueError naming the spec
        if self.block_size < 1 or (self.kv_blocks is not None and self.kv_blocks < 1):
            raise ValueError(
                f"EngineConfig: need block_size >= 1 and kv_blocks >= 1 or None, "
                f"got {self.block_size}, {self.kv_blocks}"
            )
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(
                "EngineConfig: gpu_memory_utilization must be in (0, 1], got "
                f"{self.gpu_memory_utilization}"
            )
        if (
            self.max_num_batched_tokens is not None
            and self.max_num_batched_tokens < self.max_num_seqs
        ):
            raise ValueError(
                f"EngineConfig: max_num_batched_tokens ({self.max_num_batched_tokens}) "
                f"must be >= max_num_seqs ({self.max_num_seqs})"
            )

        if self.speculative is not None:
            if (
                self.max_num_batched_tokens is not None
                or parse_dispatch(self.dispatch)[0] in HELD_DISPATCH
            ):
                raise ValueError(
                    "speculative decoding is not modelled with a token budget "
                    "(max_num_batched_tokens) or shared/deferred dispatch "
                    "(--dispatch group|round_robin|least_loaded)"
                )
            self.speculative.check_batch(self.max_num_seqs)

    @property
    def paged(self) -> bool:
        """KV blocks or a token budget are modelled (:class:`sim.engine.paged_worker.PagedWorker`)."""
        return self.kv_blocks is not None or self.max_num_batched_tokens is not None
