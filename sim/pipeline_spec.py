"""Which training pipeline to simulate: the ``--pipeline`` spec and its derived rules.

One frozen :class:`PipelineConfig` per run. Every pipeline of :mod:`sim.async_pipeline`
is the same learner/dispatcher pair with four rules derived here (see docs/pipelines.md):

| spec | lead | sync every | dispatch | version stamp | bound S_max |
|---|---|---|---|---|---|
| ``sync`` | 0 | 1 | batch-serial | dispatch | 0 |
| ``one-step-off`` | 1 | 1 | batch-serial | dispatch | 1 |
| ``interval:S`` | S-1 | S | batch-serial | dispatch | S-1 |
| ``bounded:S`` | S | 1 | streaming | dispatch | S |
| ``partial:S`` | S | 1 | streaming | last token | S |
| ``oversample:R`` | 0 | 1 | batch-serial, ceil(R B) prompts | dispatch | 0 |

``lead``: prompt batch ``j`` is dispatched only while ``j - v_gen <= lead`` (``v_gen``:
weights version on the generators; AReaL-style admission control). ``interval:S``
refreshes the behaviour policy every ``S`` learner steps (PAPERS.md §2, ``M = T/S``);
``interval:0`` and ``interval:1`` are synchronous, as in docs/staleness.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

KINDS = ("sync", "one-step-off", "interval", "bounded", "partial", "oversample")
PLACEMENTS = ("separate", "colocated")


@dataclass(frozen=True)
class PipelineConfig:
    """One pipeline: kind, its parameter and where generation and training run."""

    kind: str = "sync"
    """One of :data:`KINDS`."""
    S: int = 0
    """Staleness bound (``bounded``, ``partial``) or sync interval (``interval``), in
    learner versions; ignored by the other kinds."""
    ratio: float = 1.0
    """Over-sampling ratio R >= 1 (``oversample``): ``ceil(R B)`` prompts launched."""
    placement: str = "separate"
    """``separate``: generators and learner on their own devices (they overlap);
    ``colocated``: the same devices, time-sliced (generation is paused while the
    learner trains or syncs)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"pipeline: kind must be one of {KINDS}, got {self.kind!r}")
        if self.S < 0:
            raise ValueError(f"pipeline {self.kind}: S must be >= 0, got {self.S}")
        if not (self.ratio >= 1.0) or math.isinf(self.ratio):
            raise ValueError(
                f"pipeline oversample: ratio must be finite and >= 1, got {self.ratio}"
            )
        if self.placement not in PLACEMENTS:
            raise ValueError(
                f"pipeline: placement must be one of {PLACEMENTS}, got {self.placement!r}"
            )

    @property
    def spec(self) -> str:
        """The CLI spelling, e.g. ``bounded:4`` (placement not included)."""
        if self.kind in ("interval", "bounded", "partial"):
            return f"{self.kind}:{self.S}"
        if self.kind == "oversample":
            return f"oversample:{self.ratio:g}"
        return self.kind

    @property
    def lead(self) -> int:
        """Most versions a dispatched batch index may be ahead of ``v_gen``."""
        if self.kind == "one-step-off":
            return 1
        if self.kind == "interval":
            return max(self.S, 1) - 1
        if self.kind in ("bounded", "partial"):
            return self.S
        return 0

    @property
    def sync_every(self) -> int:
        """Learner steps between weight syncs."""
        return max(self.S, 1) if self.kind == "interval" else 1

    @property
    def streaming(self) -> bool:
        """Batches dispatched as soon as admitted (else one batch generates at a time)."""
        return self.kind in ("bounded", "partial")

    @property
    def partial(self) -> bool:
        """Rollouts keep running across a weight update and carry their last token's version."""
        return self.kind == "partial"

    @property
    def max_staleness(self) -> int:
        """``S_max``: a group with ``learner_version - policy_version > S_max`` is dropped."""
        return self.lead

    @property
    def n_prompts_factor(self) -> float:
        """Prompts launched per batch, as a multiple of B."""
        return self.ratio if self.kind == "oversample" else 1.0


def parse_pipeline(spec: str, placement: str = "separate") -> PipelineConfig:
    """Build a :class:`PipelineConfig` from ``sync | one-step-off | interval:S |
    bounded:S | partial:S | oversample:R``.

    Raises: ValueError naming the spec on an unknown kind or a bad parameter.
    """
    spec = spec.strip()
    kind, sep, arg = spec.partition(":")
    try:
        if kind in ("sync", "one-step-off") and not sep:
            return PipelineConfig(kind=kind, placement=placement)
        if kind in ("interval", "bounded", "partial") and sep:
            if not arg.strip().lstrip("-").isdigit():
                raise ValueError(f"S must be an integer number of learner steps, got {arg!r}")
            return PipelineConfig(kind=kind, S=int(arg), placement=placement)
        if kind == "oversample" and sep:
            try:
                ratio = float(arg)
            except ValueError:
                raise ValueError(
                    f"R must be a number (prompts dispatched per prompt trained), got {arg!r}"
                ) from None
            return PipelineConfig(kind=kind, ratio=ratio, placement=placement)
    except ValueError as exc:
        raise ValueError(f"pipeline spec {spec!r}: {exc}") from None
    raise ValueError(
        f"pipeline spec {spec!r}: expected sync, one-step-off, interval:S, "
        "bounded:S, partial:S or oversample:R"
    )
