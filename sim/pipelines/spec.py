"""Which training pipeline to simulate: the ``--pipeline`` spec and its derived rules.

One frozen :class:`PipelineConfig` per run. Every pipeline of :mod:`sim.pipelines.async_pipeline`
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
| ``oversample:R:group=N/K`` | 0 | 1 | both at once (tail batching) | dispatch | 0 |
| ``async:S[:opts]`` | queue/threshold | ``sync_every`` | one group at a time | group start | S |

Options (``kind:arg:name=value:...``, :func:`parse_pipeline`): every kind takes
``sync=drain|abort|inflight`` (weight-sync mode, :mod:`sim.pipelines.weight_sync`; default
``inflight``, what the pipelines always did); ``partial:S`` takes ``chunk=TOKENS``;
``oversample:R`` takes ``group=N/K`` (RollPacker's tail batching: prompts and responses
over-provisioned in one step, the slowest of both cut; with ``--park`` the cut prompts are
re-queued to a long round, else dropped) and ``route=F`` (prompts predicted long routed to
the long round before they run, :mod:`sim.pipelines.long_round`);
``async:S`` takes ``queue=N``, ``full=block|drop_oldest``, ``threshold=F``,
``sync_every=K`` and ``concurrency=N`` (:mod:`sim.pipelines.async_stream`, verl fully-async names
in docs/pipelines.md).

``lead``: prompt batch ``j`` is dispatched only while ``j - v_gen <= lead`` (``v_gen``:
weights version on the generators) for the batch-serial kinds; the streaming kinds admit
by AReaL's rule with bound ``S`` (:mod:`sim.pipelines.admission`). ``groupover:N/K`` samples ``N``
per prompt and keeps the first ``K`` to finish (a controller proposing ``G`` launches
``ceil(G N / K)`` and keeps ``G``); ``park`` (RollPacker) sends an over-sampled batch's
unfinished prompts to a later long-tail batch instead of aborting them for good. ``interval:S``
refreshes the behaviour policy every ``S`` learner steps (PAPERS.md §2, ``M = T/S``);
``interval:0`` and ``interval:1`` are synchronous, as in docs/staleness.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

KINDS = (
    "sync",
    "one-step-off",
    "interval",
    "bounded",
    "partial",
    "oversample",
    "groupover",
    "async",
)
PLACEMENTS = ("separate", "colocated")
SYNC_MODES = ("inflight", "drain", "abort")
"""Weight-sync modes (:mod:`sim.pipelines.weight_sync`); the first is the default."""
FULL_POLICIES = ("drop_oldest", "block")
"""What the ``async`` rollout queue does when full; the first (verl's) is the default."""
REFILLS = ("batch", "missing")
"""What DAPO dynamic sampling generates in its later rounds (:mod:`sim.pipelines.dynamic_sampling`):
a whole generation batch, or only the prompts still missing; the first is the default."""
DEFAULT_MAX_GEN_BATCHES = 10
"""DAPO dynamic sampling's rounds per step unless told otherwise: verl's DAPO recipe
(``recipe/dapo/run_dapo_qwen2.5_32b.sh``: ``max_num_gen_batches=10``, three times B
generated per round). A step that keeps fewer than B in 10 rounds is recorded as
aborted; verl's own default (0, unlimited) lets a run with no informative group spin
forever."""
MAX_ROUNDS = 1_000
"""Rounds one step may take with ``max_gen_batches = 0`` (unlimited) before the run is
declared hopeless: 100 times the recipe's cap, so the groups' informative probability
is below about 1/1000 (every pass rate near 0 or 1, or G = 1); the simulated rounds
are kept in memory, and 100,000 of them took minutes and gigabytes."""


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
    sync_mode: str = "inflight"
    """One of :data:`SYNC_MODES`: ``inflight`` swaps weights between decode iterations
    (running rollouts keep their KV), ``drain`` waits for every in-flight rollout,
    ``abort`` stops them and resumes their prefixes under the new weights."""
    chunk: int | None = None
    """``partial`` only: tokens a rollout may generate per learner step before it is
    paused and resumed after the next weight sync (``None`` = no chunking)."""
    queue: int | None = None
    """``async`` only: rollout-queue capacity in groups (``None``: ``max_required`` when
    ``threshold`` is given, else ``(S + 1) B``); must be >= B."""
    full: str = "drop_oldest"
    """``async`` only: one of :data:`FULL_POLICIES`."""
    threshold: float | None = None
    """``async`` only: verl's ``staleness_threshold`` in [0, 1]: at most
    ``ceil((1 + threshold) * sync_steps * B)`` groups started per weight version
    (counting those in flight or queued at the sync); ``None`` = no such bound."""
    sync_steps: int = 1
    """``async`` only: learner steps between weight syncs (verl's
    ``trigger_parameter_sync_step``)."""
    concurrency: int | None = None
    """``async`` only: groups generating at once (``None`` = B)."""

    n_sample: int = 1
    """``groupover:N/K``: samples launched per ``n_keep`` kept (N)."""
    n_keep: int = 1
    """``groupover:N/K``: samples kept per prompt (K), the first to finish."""
    park: bool = False
    """RollPacker-style parking (``oversample:R`` only): prompts left unfinished when the
    learner has its B groups are aborted and re-dispatched together, B at a time, as a
    later long-tail batch, instead of being lost."""
    route: float | None = None
    """``oversample:R`` only, ``F >= 1``: a prompt whose earlier rollouts averaged more
    than ``F`` times the mean length of every rollout seen so far is routed to the long
    round instead of its regular batch (:mod:`sim.pipelines.long_round`); ``None``: off."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"pipeline: kind must be one of {KINDS}, got {self.kind!r}")
        if self.sync_mode not in SYNC_MODES:
            raise ValueError(
                f"pipeline {self.kind}: sync mode must be one of {SYNC_MODES}, got {self.sync_mode!r}"
            )
        if self.chunk is not None and self.kind != "partial":
            raise ValueError(f"pipeline {self.kind}: chunk=T is for partial:S only")
        if self.chunk is not None and self.chunk < 1:
            raise ValueError(f"pipeline partial: chunk must be >= 1 token, got {self.chunk}")
        self._check_async()
        if self.S < 0:
            raise ValueError(f"pipeline {self.kind}: S must be >= 0, got {self.S}")
        if not (self.ratio >= 1.0) or math.isinf(self.ratio):
            raise ValueError(
                f"pipeline oversample: ratio must be finite and >= 1, got {self.ratio}"
            )
        if not (1 <= self.n_keep <= self.n_sample):
            raise ValueError(
                f"pipeline {self.kind}: need 1 <= K <= N, got N={self.n_sample}, K={self.n_keep}"
            )
        if (self.n_sample, self.n_keep) != (1, 1) and self.kind not in ("groupover", "oversample"):
            raise ValueError(f"pipeline {self.kind}: group=N/K is for oversample:R only")
        if self.park and self.kind != "oversample":
            raise ValueError(
                f"--park: pipeline {self._spec} leaves no unfinished prompts to park; "
                "parking needs oversample:R"
            )
        if self.route is not None and not (
            self.kind == "oversample" and 1.0 <= self.route < math.inf
        ):
            raise ValueError(
                f"pipeline {self.kind}: route=F needs oversample:R and a finite F >= 1"
            )
        if self.placement not in PLACEMENTS:
            raise ValueError(
                f"pipeline: placement must be one of {PLACEMENTS}, got {self.placement!r}"
            )

    def _check_async(self) -> None:
        if self.kind != "async":
            defaults = PipelineConfig.__dataclass_fields__
            used = [
                k
                for k in ("queue", "full", "threshold", "sync_steps", "concurrency")
                if getattr(self, k) != defaults[k].default
            ]
            if used:
                raise ValueError(f"pipeline {self.kind}: option(s) {used} are for async:S only")
            return
        if self.full not in FULL_POLICIES:
            raise ValueError(
                f"pipeline async: full must be one of {FULL_POLICIES}, got {self.full!r}"
            )
        t = self.threshold
        if t is not None and not (0.0 <= t <= 1.0):
            raise ValueError(f"pipeline async: threshold must be in [0, 1], got {t}")
        for name in ("queue", "concurrency", "sync_steps"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"pipeline async: {name} must be >= 1, got {v}")
        if self.S < self.sync_steps - 1:  # weights change every K steps: lag up to K - 1
            raise ValueError(
                f"pipeline async: staleness cap S = {self.S} is below sync_every - 1 = "
                f"{self.sync_steps - 1}: every group would be dropped"
            )

    def check_batch(self, B: int) -> None:
        """Raise ValueError if this pipeline cannot run with batches of ``B`` groups
        (an ``async`` queue capacity below ``B``: the learner could never fill a step)."""
        if self.kind == "async" and self.queue_capacity(B) < B:
            raise ValueError(
                f"pipeline {self.spec}: queue capacity {self.queue_capacity(B)} is below "
                f"the batch of B = {B} groups"
            )

    def max_required(self, B: int) -> int | None:
        """``async``: groups that may be started per weight version, verl's
        ``max_required_samples = required * (1 + staleness_threshold) *
        trigger_parameter_sync_step`` (``None`` without a threshold)."""
        if self.threshold is None:
            return None
        return math.ceil((1.0 + self.threshold) * self.sync_steps * B - 1e-9)

    def queue_capacity(self, B: int) -> int:
        """``async``: rollout-queue capacity in groups (see :attr:`queue`)."""
        if self.queue is not None:
            return self.queue
        return self.max_required(B) or (self.S + 1) * B

    @property
    def spec(self) -> str:
        """The CLI spelling, e.g. ``bounded:4`` or ``async:2:queue=64:sync=drain``
        (placement not included; options only where not at their default); ``+park`` is
        appended with ``--park`` (``oversample:1.25+park``)."""
        return self._spec + ("+park" if self.park else "")

    @property
    def _spec(self) -> str:
        if self.kind in ("interval", "bounded", "partial", "async"):
            head = f"{self.kind}:{self.S}"
        elif self.kind == "oversample":
            head = f"oversample:{self.ratio:g}"
            if self.trims:
                head += f":group={self.n_sample}/{self.n_keep}"
        elif self.kind == "groupover":
            head = f"groupover:{self.n_sample}/{self.n_keep}"
        else:
            head = self.kind
        opts = [
            f"{name}={getattr(self, field):g}"
            if isinstance(getattr(self, field), float)
            else f"{name}={getattr(self, field)}"
            for name, field in _OPTIONS.items()
            if getattr(self, field) != PipelineConfig.__dataclass_fields__[field].default
        ]
        return ":".join([head, *opts])

    @property
    def lead(self) -> int:
        """Most versions a dispatched batch index may be ahead of ``v_gen`` (``async``:
        not used for admission, :mod:`sim.pipelines.async_stream`)."""
        if self.kind == "one-step-off":
            return 1
        if self.kind == "interval":
            return max(self.S, 1) - 1
        if self.kind in ("bounded", "partial", "async"):
            return self.S
        return 0

    @property
    def sync_every(self) -> int:
        """Learner steps between weight syncs."""
        if self.kind == "async":
            return self.sync_steps
        return max(self.S, 1) if self.kind == "interval" else 1

    @property
    def streaming(self) -> bool:
        """Batches dispatched as soon as admitted (else one batch generates at a time);
        ``async`` has its own group launcher (:mod:`sim.pipelines.async_stream`), not this rule."""
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
        if not self.trims:
            return G
        return -(-G * self.n_sample // self.n_keep)

    @property
    def trims(self) -> bool:
        """Responses over-provisioned: more samples launched per prompt than kept
        (``groupover:N/K``, ``oversample:R:group=N/K`` with ``N > K``)."""
        return self.n_sample > self.n_keep

    @property
    def n_prompts_factor(self) -> float:
        """Prompts launched per batch, as a multiple of B."""
        return self.ratio if self.kind == "oversample" else 1.0


_OPTIONS = {
    "sync": "sync_mode",
    "chunk": "chunk",
    "queue": "queue",
    "full": "full",
    "threshold": "threshold",
    "sync_every": "sync_steps",
    "concurrency": "concurrency",
    "route": "route",
}
"""Spec option name -> :class:`PipelineConfig` field."""
_INT_OPTIONS = ("chunk", "queue", "sync_every", "concurrency")


def _parse_options(parts: list[str]) -> dict:
    """``["queue=64", "full=block"]`` -> PipelineConfig keyword arguments. Raises
    ValueError on an unknown or repeated option or a value of the wrong type."""
    out: dict = {}
    for part in parts:
        name, eq, value = part.partition("=")
        name, value = name.strip(), value.strip()
        if eq and name == "group":  # group=N/K: responses over-provisioned too
            n, slash, k = value.partition("/")
            if not (slash and n.strip().isdigit() and k.strip().isdigit()) or "n_sample" in out:
                raise ValueError(f"expected group=N/K with integers N >= K >= 1, got {value!r}")
            out["n_sample"], out["n_keep"] = int(n), int(k)
            continue
        if not eq or name not in _OPTIONS:
            names = ", ".join([*_OPTIONS, "group"])
            raise ValueError(f"unknown option {part!r}; options are {names}=...")
        field = _OPTIONS[name]
        if field in out:
            raise ValueError(f"option {name!r} given twice")
        if name in _INT_OPTIONS:
            if not value.lstrip("-").isdigit():
                raise ValueError(f"option {name} must be an integer, got {value!r}")
            out[field] = int(value)
        elif name in ("threshold", "route"):
            try:
                out[field] = float(value)
            except ValueError:
                raise ValueError(f"option {name} must be a number, got {value!r}") from None
        else:
            out[field] = value
    return out


def parse_pipeline(
    spec: str, placement: str = "separate", park: bool = False, *, sync_mode: str | None = None
) -> PipelineConfig:
    """Build a :class:`PipelineConfig` from ``sync | one-step-off | interval:S |
    bounded:S | partial:S | oversample:R | groupover:N/K | async:S``, each optionally
    followed by ``:name=value`` options (module doc). ``park``: ``--park``. ``sync_mode``
    (the CLI's ``--sync-mode``) applies unless the spec has its own ``sync=`` option.

    Raises: ValueError naming the spec on an unknown kind, option or a bad parameter.
    """
    spec = spec.strip()
    kind, *parts = spec.split(":")
    n_pos = 1 if parts and "=" not in parts[0] else 0
    arg, sep = (parts[0], ":") if n_pos else ("", "")
    try:
        opts = _parse_options(parts[n_pos:])
        if sync_mode is not None:
            opts.setdefault("sync_mode", sync_mode)
        if kind in ("sync", "one-step-off") and not sep:
            return PipelineConfig(kind=kind, placement=placement, park=park, **opts)
        if kind in ("interval", "bounded", "partial", "async") and sep:
            if not arg.strip().lstrip("-").isdigit():
                raise ValueError(f"S must be an integer number of learner steps, got {arg!r}")
            return PipelineConfig(kind=kind, S=int(arg), placement=placement, park=park, **opts)
        if kind == "oversample" and sep:
            try:
                ratio = float(arg)
            except ValueError:
                raise ValueError(
                    f"R must be a number (prompts dispatched per prompt trained), got {arg!r}"
                ) from None
            return PipelineConfig(kind=kind, ratio=ratio, placement=placement, park=park, **opts)
        if kind == "groupover" and sep:
            if "n_sample" in opts:
                raise ValueError("group=N/K is for oversample:R (groupover:N/K has its N/K)")
            n, slash, k = arg.partition("/")
            if not (slash and n.strip().isdigit() and k.strip().isdigit()):
                raise ValueError(f"expected groupover:N/K with integers N >= K >= 1, got {arg!r}")
            return PipelineConfig(
                kind=kind, n_sample=int(n), n_keep=int(k), placement=placement, park=park, **opts
            )
    except ValueError as exc:
        raise ValueError(f"pipeline spec {spec!r}: {exc}") from None
    raise ValueError(
        f"pipeline spec {spec!r}: expected sync, one-step-off, interval:S, "
        "bounded:S, partial:S, oversample:R, groupover:N/K or async:S (then :name=value options)"
    )
