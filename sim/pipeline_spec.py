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
| ``groupover:N/K`` | 0 | 1 | batch-serial, ceil(G N/K) samples a prompt | dispatch | 0 |

``lead``: prompt batch ``j`` is dispatched only while ``j - v_gen <= lead`` (``v_gen``:
weights version on the generators) for the batch-serial kinds; the streaming kinds admit
by AReaL's rule with bound ``S`` (:mod:`sim.admission`). ``groupover:N/K`` samples ``N``
per prompt and keeps the first ``K`` to finish (a controller proposing ``G`` launches
``ceil(G N / K)`` and keeps ``G``); ``park`` (RollPacker) sends an over-sampled batch's
unfinished prompts to a later long-tail batch instead of aborting them for good. ``interval:S``
refreshes the behaviour policy every ``S`` learner steps (PAPERS.md §2, ``M = T/S``);
``interval:0`` and ``interval:1`` are synchronous, as in docs/staleness.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

KINDS = ("sync", "one-step-off", "interval", "bounded", "partial", "oversample", "groupover")
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

    n_sample: int = 1
    """``groupover:N/K``: samples launched per ``n_keep`` kept (N)."""
    n_keep: int = 1
    """``groupover:N/K``: samples kept per prompt (K), the first to finish."""
    park: bool = False
    """RollPacker-style parking (``oversample:R`` only): prompts left unfinished when the
    learner has its B groups are aborted and re-dispatched together, B at a time, as a
    later long-tail batch, instead of being lost."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"pipeline: kind must be one of {KINDS}, got {self.kind!r}")
        if self.S < 0:
            raise ValueError(f"pipeline {self.kind}: S must be >= 0, got {self.S}")
        if not (self.ratio >= 1.0) or math.isinf(self.ratio):
            raise ValueError(
                f"pipeline oversample: ratio must be finite and >= 1, got {self.ratio}"
            )
        if not (1 <= self.n_keep <= self.n_sample):
            raise ValueError(
                f"pipeline groupover: need 1 <= K <= N, got N={self.n_sample}, K={self.n_keep}"
            )
        if self.park and self.kind != "oversample":
            raise ValueError(
                f"--park: pipeline {self._spec} leaves no unfinished prompts to park; "
                "parking needs oversample:R"
            )
        if self.placement not in PLACEMENTS:
            raise ValueError(
                f"pipeline: placement must be one of {PLACEMENTS}, got {self.placement!r}"
            )

    @property
    def spec(self) -> str:
        """The CLI spelling, e.g. ``bounded:4`` (placement not included); ``+park`` is
        appended with ``--park`` (``oversample:1.25+park``)."""
        return self._spec + ("+park" if self.park else "")

    @property
    def _spec(self) -> str:
        if self.kind in ("interval", "bounded", "partial"):
            return f"{self.kind}:{self.S}"
        if self.kind == "oversample":
            return f"oversample:{self.ratio:g}"
        if self.kind == "groupover":
            return f"groupover:{self.n_sample}/{self.n_keep}"
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

    def launched(self, G: int) -> int:
        """Samples launched per prompt for a proposed group size ``G``: ``ceil(G N / K)``
        for ``groupover:N/K`` (``N`` when ``G = K``), else ``G``."""
        if self.kind != "groupover":
            return G
        return -(-G * self.n_sample // self.n_keep)

    @property
    def n_prompts_factor(self) -> float:
        """Prompts launched per batch, as a multiple of B."""
        return self.ratio if self.kind == "oversample" else 1.0


def parse_pipeline(spec: str, placement: str = "separate", park: bool = False) -> PipelineConfig:
    """Build a :class:`PipelineConfig` from ``sync | one-step-off | interval:S |
    bounded:S | partial:S | oversample:R | groupover:N/K`` (``park``: ``--park``).

    Raises: ValueError naming the spec on an unknown kind or a bad parameter.
    """
    spec = spec.strip()
    kind, sep, arg = spec.partition(":")
    try:
        if kind in ("sync", "one-step-off") and not sep:
            return PipelineConfig(kind=kind, placement=placement, park=park)
        if kind in ("interval", "bounded", "partial") and sep:
            if not arg.strip().lstrip("-").isdigit():
                raise ValueError(f"S must be an integer number of learner steps, got {arg!r}")
            return PipelineConfig(kind=kind, S=int(arg), placement=placement, park=park)
        if kind == "oversample" and sep:
            try:
                ratio = float(arg)
            except ValueError:
                raise ValueError(
                    f"R must be a number (prompts dispatched per prompt trained), got {arg!r}"
                ) from None
            return PipelineConfig(kind=kind, ratio=ratio, placement=placement, park=park)
        if kind == "groupover" and sep:
            n, slash, k = arg.partition("/")
            if not (slash and n.strip().isdigit() and k.strip().isdigit()):
                raise ValueError(f"expected groupover:N/K with integers N >= K >= 1, got {arg!r}")
            return PipelineConfig(
                kind=kind, n_sample=int(n), n_keep=int(k), placement=placement, park=park
            )
    except ValueError as exc:
        raise ValueError(f"pipeline spec {spec!r}: {exc}") from None
    raise ValueError(
        f"pipeline spec {spec!r}: expected sync, one-step-off, interval:S, "
        "bounded:S, partial:S, oversample:R or groupover:N/K"
    )
