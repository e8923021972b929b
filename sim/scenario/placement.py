"""Placement of a run on ``N`` GPUs: how many generate, how many train, and what the
learner and the weight sync then cost (``--gpus N --split R:T``).

- separate (``R:T``, ``R + T = N``): ``R / tp`` rollout replicas of ``tp`` GPUs each and
  a trainer on ``T`` GPUs (FSDP); each weight sync sends the weights to every replica
  (:func:`sim.models.learner_cost.weight_sync_s`, broadcast or bucketed);
- colocated (no split): every GPU generates (``N / tp`` replicas) and trains, time-sliced
  as the ``colocated`` placement already is; a sync gathers the FSDP shards within a node.

:func:`apply_split` returns the scenario with the worker count and the learner and sync
terms of its :class:`~sim.models.cost.LinearCost` set from the learner roofline
(:func:`sim.models.learner_cost.learner_phases`, linear in the batch's tokens: its value
at 0 tokens is ``learner_const_s``, its slope ``learner_s_per_token``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rolloutlab.sim.models.dp_imbalance import Imbalance
from rolloutlab.sim.models.hardware import Accelerator, ModelConfig, get_gpu, get_model
from rolloutlab.sim.models.learner_cost import (
    TIMING_KEYS,
    WEIGHT_TRANSFERS,
    Layout,
    LearnerEfficiency,
    Network,
    learner_phases,
    ring_s,
    weight_sync_s,
)
from rolloutlab.sim.models.micro_batching import DynamicBatch
from rolloutlab.sim.scenario.scenario import Scenario

TRAIN_BYTES_PER_PARAM = 16
"""Training state per parameter with Adam in mixed precision: bf16 weight and gradient
(4 B), fp32 master weight, m and v (12 B); activations not counted (Rajbhandari et al.,
SC'20, "ZeRO", §3.1)."""
MEMORY_UTILIZATION = 0.9
"""Share of a GPU's memory the weights (rollout) or training state (trainer) may take."""


@dataclass(frozen=True)
class Split:
    """``gpus`` GPUs: ``rollout`` generate in replicas of ``tp``, ``trainer`` train
    (``colocated``: all of them do both)."""

    gpus: int
    rollout: int
    trainer: int
    tp: int = 1
    colocated: bool = False

    def __post_init__(self) -> None:
        if min(self.gpus, self.rollout, self.trainer, self.tp) < 1:
            raise ValueError(f"--split: every GPU count must be >= 1, got {self}")
        if not self.colocated and self.rollout + self.trainer != self.gpus:
            raise ValueError(
                f"--split {self.rollout}:{self.trainer} adds up to "
                f"{self.rollout + self.trainer} GPUs, not --gpus {self.gpus}"
            )
        if self.rollout % self.tp:
            raise ValueError(
                f"--tp {self.tp} does not divide the {self.rollout} rollout GPUs into replicas"
            )

    @property
    def replicas(self) -> int:
        """Rollout replicas (engine workers)."""
        return self.rollout // self.tp


def parse_split(gpus: int, spec: str | None, tp: int = 1, colocated: bool = False) -> Split:
    """``--gpus N --split R:T`` (separate) or ``--gpus N`` alone (colocated: every GPU
    generates and trains). Raises ValueError naming the option on a malformed spec, a
    split that does not add up to ``gpus``, a split given with colocated placement, a
    separate placement without one, or ``tp`` not dividing the rollout GPUs."""
    if colocated:
        if spec is not None:
            raise ValueError("--split is for --placement separate; colocated GPUs do both")
        return Split(gpus, gpus, gpus, tp, colocated=True)
    if spec is None:
        raise ValueError("--gpus with --placement separate needs --split R:T")
    r, colon, t = spec.partition(":")
    if not (colon and r.strip().isdigit() and t.strip().isdigit()):
        raise ValueError(f"--split: expected R:T (rollout GPUs : trainer GPUs), got {spec!r}")
    return Split(gpus, int(r), int(t), tp)


def check_memory(split: Split, model: ModelConfig, gpu: Accelerator) -> None:
    """Raise ValueError saying by how many GB the model is too large for its GPUs: its
    bf16 weights on a rollout replica's ``tp`` GPUs, or its training state
    (:data:`TRAIN_BYTES_PER_PARAM`, sharded by FSDP) on the trainer's, each against
    :data:`MEMORY_UTILIZATION` of the GPUs' memory."""
    for what, need, n in (
        ("weights on a rollout replica", model.weight_bytes(), split.tp),
        ("training state on the trainer", TRAIN_BYTES_PER_PARAM * model.n_params(), split.trainer),
    ):
        have = n * MEMORY_UTILIZATION * gpu.memory_bytes
        if need > have:
            raise ValueError(
                f"{model.name}: its {what} need {need / 1e9:.1f} GB but {n} x {gpu.name} "
                f"hold {have / 1e9:.1f} GB ({MEMORY_UTILIZATION:.0%}): "
                f"{(need - have) / 1e9:.1f} GB short"
            )


PHASE_PREFIX = "timing_s/"
"""verl's prefix of its timing keys; ``--learner-phases`` accepts names with or without it."""


def parse_phases(text: str) -> tuple[str, ...]:
    """The learner phases of ``--learner-phases``: comma-separated names among
    ``old_log_prob``, ``ref`` and ``update_actor`` (verl's timing keys, the ``timing_s/``
    prefix optional), returned as full timing keys in :data:`TIMING_KEYS` order. verl
    fully-async with rollout log-probs and no KL loss runs only ``update_actor``
    (docs/pipelines.md, "Placement and split"). Raises ValueError on an empty list, an
    unknown name or a name given twice."""
    names = [t.strip() for t in text.split(",")]
    if not any(names) or not all(names):
        raise ValueError(f"--learner-phases: empty phase name in {text!r}")
    keys = [n if n.startswith(PHASE_PREFIX) else PHASE_PREFIX + n for n in names]
    allowed = TIMING_KEYS[:3]
    for n, k in zip(names, keys, strict=True):
        if k not in allowed:
            short = ", ".join(a.removeprefix(PHASE_PREFIX) for a in allowed)
            raise ValueError(f"--learner-phases: unknown phase {n!r} (choose from {short})")
    if len(set(keys)) < len(keys):
        raise ValueError(f"--learner-phases: a phase is given twice in {text!r}")
    return tuple(k for k in allowed if k in keys)


def apply_split(
    sc: Scenario,
    split: Split,
    model: ModelConfig,
    gpu: Accelerator,
    net: Network | None = None,
    sync: str = "broadcast",
    eff: LearnerEfficiency | None = None,
    phases: tuple[str, ...] = TIMING_KEYS[:3],
    updates: int = 1,
    imbalance: Imbalance | None = None,
    batching: DynamicBatch | None = None,
    tokens_at: float = 1e6,
    layout: Layout | None = None,
) -> Scenario:
    """``sc`` on ``split``: ``split.replicas`` workers, the learner terms of its cost from
    the roofline of an FSDP trainer on ``split.trainer`` GPUs (the sum of ``phases``, verl's
    timing keys, at ``updates`` optimizer updates per step: verl fully-async with rollout
    log-probs and no KL runs only ``timing_s/update_actor``), the sync term from
    :func:`sim.models.learner_cost.weight_sync_s` (``sync``: broadcast or bucketed) or,
    colocated, an all-gather of the weights within a node. ``imbalance`` (off when None)
    multiplies the per-token learner term by its
    :meth:`sim.models.dp_imbalance.Imbalance.factor` over the trainer's data-parallel
    GPUs, from the scenario's length model. ``batching`` (off when None) prices the
    trainer's collectives per token-budget micro-batch
    (:class:`sim.models.micro_batching.DynamicBatch`); the learner cost, linear in the
    step's tokens, is the line through its values at 0 and ``tokens_at`` tokens (exact at
    ``tokens_at``: pass a step's expected tokens when ``batching`` is set or the
    layout's micro-batches follow the step's tokens). ``layout`` (default FSDP over
    ``split.trainer`` GPUs) sets the trainer's parallelism, e.g. Megatron's TP x PP with
    expert parallelism (:class:`sim.models.learner_cost.Layout`).
    The decode cost is the scenario's (``--model --gpu --tp`` sets it).
    Raises ValueError on ``tokens_at <= 0``, a ``layout`` on other than ``split.trainer``
    GPUs, as :meth:`Imbalance.factor`, as :func:`check_memory`, on an unknown ``sync``
    mode or phase, or a bad bandwidth."""
    net, eff = net or Network(), eff or LearnerEfficiency()
    if sync not in WEIGHT_TRANSFERS:
        raise ValueError(f"--weight-sync: must be one of {WEIGHT_TRANSFERS}, got {sync!r}")
    if not set(phases) <= set(TIMING_KEYS[:3]):
        raise ValueError(f"learner phases must be among {TIMING_KEYS[:3]}, got {phases}")
    if not tokens_at > 0:
        raise ValueError(f"learner: tokens_at must be > 0, got {tokens_at}")
    check_memory(split, model, gpu)
    lay = layout or Layout(split.trainer)
    if lay.gpus != split.trainer:
        raise ValueError(f"layout on {lay.gpus} GPUs, but the trainer has {split.trainer}")
    step = {
        T: sum(
            v
            for k, v in learner_phases(
                model, gpu, lay, T, eff, net, updates, batching=batching
            ).items()
            if k in phases
        )
        for T in (0.0, tokens_at)
    }
    factor = 1.0
    if imbalance is not None:
        factor = imbalance.factor(sc.lengths, sc.prompt_tokens, lay.dp)
    S = model.weight_bytes()
    if split.colocated:
        nodes_span = min(split.gpus, net.gpus_per_node)
        sync_s = ring_s("all_gather", S, nodes_span, net.nvlink_bytes_per_s, net.alpha_s)
    else:
        sync_s = weight_sync_s(S, split.replicas, net.net_bytes_per_s, sync)
    cost = dataclasses.replace(
        sc.cost,
        learner_const_s=step[0.0],
        learner_s_per_token=factor * (step[tokens_at] - step[0.0]) / tokens_at,
        sync_s=sync_s,
        weight_bytes=0.0,
        sync_s_per_byte=0.0,
        sync_n_tensors=0.0,
    )
    engine = dataclasses.replace(sc.engine, n_workers=split.replicas)
    return dataclasses.replace(sc, cost=cost, engine=engine)


def place(sc: Scenario, spec: str, gpus: int, tp: int, model: str, gpu: str) -> Scenario:
    """:func:`apply_split` of ``sc`` on ``--gpus gpus --split spec`` for the named model and
    accelerator (default network and efficiencies); a module-level function so that a
    ``functools.partial`` of it travels to grid workers. Raises ValueError as
    :func:`parse_split` and :func:`apply_split`."""
    return apply_split(sc, parse_split(gpus, spec, tp), get_model(model), get_gpu(gpu))
