"""A verl trainer config (YAML) read for the simulator: every field with a simulator
meaning mapped, every other one listed as ignored (``rolloutlab sim --verl-config`` and
``rolloutlab scenario from-verl``; docs/verl_config.md).

Accepted: the nested YAML of ``verl/trainer/config/ppo_trainer.yaml`` and of a run's
resolved ``.hydra/config.yaml``, a partial config of verl's examples (``defaults:`` of
hydra are not composed: only the file's own fields are read), and dotted keys
(``data.train_batch_size: 256``, as in a command-line override). ``${a.b}`` and
``${oc.select:a.b, default}`` interpolations are resolved within the file.

| verl field | simulator setting |
|---|---|
| ``data.train_batch_size`` | prompts per step B (sync, one-step-off) |
| ``async_training.require_batches`` x ``actor_rollout_ref.actor.ppo_mini_batch_size`` | B (fully async: prompts per learner step) |
| ``actor_rollout_ref.rollout.n`` | group size G (controller ``static:G``) |
| ``actor_rollout_ref.actor.ppo_mini_batch_size``, ``.ppo_epochs`` | optimizer updates per batch K = ``ceil(B / ppo_mini_batch_size) x ppo_epochs`` (``--updates-per-batch``) |
| ``data.max_response_length`` / ``actor_rollout_ref.rollout.response_length`` | response cap (``lengths.max_response_length``) |
| ``data.max_prompt_length`` / ``actor_rollout_ref.rollout.prompt_length`` | prompt tokens capped at it |
| ``trainer.nnodes`` x ``trainer.n_gpus_per_node`` | generation GPUs (colocated sync) |
| ``rollout.nnodes`` x ``rollout.n_gpus_per_node`` | generation GPUs (one-step-off, fully async) |
| ``actor_rollout_ref.rollout.tensor_model_parallel_size`` | TP: workers = GPUs / TP; roofline ``--tp`` |
| ``actor_rollout_ref.model.path`` | roofline ``--model`` when the name is a known model |
| ``actor_rollout_ref.rollout.max_num_seqs`` | ``engine.max_num_seqs`` |
| ``async_training.*`` (present) / a top-level ``rollout`` block | pipeline ``async:S`` / ``one-step-off`` (else ``sync``, colocated) |
| ``async_training.staleness_threshold``, ``.trigger_parameter_sync_step``, ``.partial_rollout`` | ``threshold=F``, ``sync_every=K``, ``sync=abort`` / ``drain`` |
| ``algorithm.filter_groups.enable``, ``.max_num_gen_batches``; ``data.gen_batch_size`` | ``--dynamic-sampling``, ``--max-gen-batches``, ``--gen-batch-factor`` |
| ``actor_rollout_ref.rollout.max_num_batched_tokens``, ``.enable_chunked_prefill`` | ``engine.max_num_batched_tokens``, ``engine.chunked_prefill`` |
| ``actor_rollout_ref.rollout.gpu_memory_utilization`` | ``engine.gpu_memory_utilization``: the roofline's KV cache (with ``--gpu``) |
| ``actor_rollout_ref.rollout.mode`` | dispatch: ``sync`` -> ``group``, ``async`` -> ``least_loaded`` (:data:`ROLLOUT_DISPATCH`) |
| ``actor_rollout_ref.actor.optim.lr`` | learning rate (``defaults.lr``: the learning gain, the staleness margin) |
| ``trainer.total_training_steps`` | learner steps |
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rolloutlab.calibration.readers.verl_yaml import VerlConfigError, read_flat
from rolloutlab.sim.models.hardware import MODELS

__all__ = ["VerlConfigError", "read_flat", "load", "map_config"]

MODES = ("sync", "one-step-off", "fully-async")
GROUP_ESTIMATORS = ("grpo", "rloo", "grpo_passk", "reinforce_plus_plus_baseline", "opo", "gpg")
"""verl ``algorithm.adv_estimator`` values whose advantage is computed within a group."""


@dataclass(frozen=True)
class Mapped:
    """One verl field the mapping used."""

    field: str
    """The verl field, dotted (``data.train_batch_size``)."""
    value: Any
    """Its value in the file (interpolations resolved)."""
    setting: str
    """The simulator setting it gives (``prompts B``, ``pipeline``...)."""
    note: str = ""
    """How, when not one to one."""


@dataclass(frozen=True)
class VerlMapping:
    """What a verl config means to the simulator."""

    path: str
    mode: str
    """One of :data:`MODES`."""
    settings: dict[str, Any]
    """Simulator settings by name: ``prompts``, ``group_size``, ``max_response_length``,
    ``max_prompt_length``, ``workers``, ``tp``, ``model`` (a :data:`sim.models.hardware.MODELS`
    key), ``max_num_seqs``, ``pipeline`` (a ``--pipeline`` spec), ``placement``,
    ``dynamic_sampling``, ``max_gen_batches``, ``gen_batch_factor``, ``steps``,
    ``max_num_batched_tokens``, ``chunked_prefill``, ``gpu_memory_utilization``,
    ``dispatch``, ``lr``, ``updates_per_batch``; only those the file gives."""
    rows: list[Mapped]
    """The fields used, in table order."""
    ignored: list[str]
    """Every other leaf field of the file (no simulator meaning), sorted."""
    missing: list[str] = field(default_factory=list)
    """Fields with a simulator meaning that the file does not set (the scenario's value
    stays)."""


def _model_key(model_path: str) -> str | None:
    """The :data:`MODELS` key a model path names (``Qwen/Qwen2.5-7B-Instruct`` ->
    ``qwen2.5-7b``), or None."""
    base = str(model_path).rstrip("/").rsplit("/", 1)[-1].lower()
    hits = [k for k in MODELS if base == k or base.startswith(k + "-")]
    return max(hits, key=len) if hits else None


def _size(model_path: str) -> str:
    m = re.search(r"(\d+(?:\.\d+)?)[bB](?![a-zA-Z])", str(model_path).rsplit("/", 1)[-1])
    return f"{m.group(1)}B parameters" if m else "size not in the name"


_YAML12_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
"""A float as OmegaConf (YAML 1.2) reads it; PyYAML (YAML 1.1) needs a dot (``1.0e-6``)."""


class _Reader:
    """Typed access to the flat fields, recording what was used."""

    def __init__(self, flat: dict[str, Any], path: str):
        self.flat, self.path = flat, path
        self.rows: list[Mapped] = []
        self.used: set[str] = set()
        self.missing: list[str] = []

    def get(self, key: str, kind: type, minimum: float | None = None) -> Any:
        """The field's value as ``kind`` (None when absent or null). Raises
        :class:`VerlConfigError` naming the file and field for another type or a value
        below ``minimum``."""
        if key not in self.flat:
            return None
        if self.flat[key] is None:
            self.missing.append(key)  # null in the file: the scenario's value stays
            return None
        v = self.flat[key]
        ok = (
            isinstance(v, bool) if kind is bool else isinstance(v, kind) and not isinstance(v, bool)
        )
        if kind is float and isinstance(v, int) and not isinstance(v, bool):
            v, ok = float(v), True
        if kind is float and isinstance(v, str) and _YAML12_FLOAT.fullmatch(v.strip()):
            v, ok = float(v), True  # 1e-6: a float to verl's OmegaConf, a string to PyYAML
        if not ok or (kind is float and not math.isfinite(v)):
            raise VerlConfigError(f"{self.path}: field {key}: expected {kind.__name__}, got {v!r}")
        if minimum is not None and v < minimum:
            raise VerlConfigError(f"{self.path}: field {key}: must be >= {minimum:g}, got {v!r}")
        return v

    def row(self, key: str, setting: str, note: str = "") -> None:
        """Record ``key`` (used) as giving ``setting``."""
        self.used.add(key)
        self.rows.append(Mapped(key, self.flat.get(key), setting, note))

    def need(self, *keys: str) -> None:
        """Note ``keys`` as meaningful but not in the file."""
        self.missing += [k for k in keys if self.flat.get(k) is None and k not in self.missing]


VERL_BLOCKS = (
    "data",
    "actor_rollout_ref",
    "trainer",
    "algorithm",
    "critic",
    "reward_model",
    "custom_reward_function",
    "rollout",
    "async_training",
    "ray_init",
    "ray_kwargs",
)
"""Top-level blocks of verl's trainer configs (``ppo_trainer.yaml``, the one-step-off and
fully-async recipes); a file with none of them is not a verl config."""


def check_verl(flat: dict[str, Any], path: str) -> None:
    """Raise :class:`VerlConfigError` naming the file when none of its fields lies in a
    :data:`VERL_BLOCKS` block (a calibration JSON, another tool's config: mapping it would
    run the default scenario as if it were the user's run)."""
    tops = sorted({k.split(".", 1)[0] for k in flat})
    if not any(t in VERL_BLOCKS for t in tops):
        found = ", ".join(tops[:8]) + (", ..." if len(tops) > 8 else "")
        raise VerlConfigError(
            f"{path}: not a verl trainer config: no data, actor_rollout_ref, trainer or "
            f"algorithm block (its top-level fields: {found or 'none'})"
        )


def map_config(flat: dict[str, Any], path: str = "<config>") -> VerlMapping:
    """The simulator meaning of the flat verl fields ``flat`` (:func:`read_flat`).
    Raises :class:`VerlConfigError` naming the file and field for a file that is not a
    verl config (:func:`check_verl`), a value of the wrong type or range, or GPUs that TP
    does not divide."""
    check_verl(flat, path)
    r, s = _Reader(flat, path), {}
    async_mode = any(k.startswith("async_training.") for k in flat)
    split = any(k in flat for k in ("rollout.nnodes", "rollout.n_gpus_per_node"))
    mode = "fully-async" if async_mode else ("one-step-off" if split else "sync")
    arr = "actor_rollout_ref."
    if mode == "fully-async":
        req = r.get("async_training.require_batches", int, 1)
        mini = r.get(arr + "actor.ppo_mini_batch_size", int, 1)
        if req is not None and mini is not None:
            s["prompts"] = req * mini
            r.row(arr + "actor.ppo_mini_batch_size", "prompts B", f"B = {req} x {mini}")
        if req is not None:
            r.row("async_training.require_batches", "prompts B", "x ppo_mini_batch_size")
        r.need("async_training.require_batches", arr + "actor.ppo_mini_batch_size")
    elif (B := r.get("data.train_batch_size", int, 1)) is not None:
        s["prompts"] = B
        r.row("data.train_batch_size", "prompts B")
    else:
        r.need("data.train_batch_size")
    n_key = arr + "rollout.n" if arr + "rollout.n" in flat else "rollout.n"
    if (G := r.get(n_key, int, 1)) is not None:
        s["group_size"] = G
        r.row(n_key, "group size G", f"controller static:{G}")
    else:
        r.need(arr + "rollout.n")
    for name, keys in (
        ("max_response_length", ("data.max_response_length", arr + "rollout.response_length")),
        ("max_prompt_length", ("data.max_prompt_length", arr + "rollout.prompt_length")),
    ):
        vals = [(k, r.get(k, int, 1)) for k in keys]
        given = [(k, v) for k, v in vals if v is not None]
        if given:
            s[name] = given[-1][1]  # the rollout's own value is what the engine gets
            for k, _ in given:
                what = "response cap" if name == "max_response_length" else "prompt tokens cap"
                r.row(k, what)
        else:
            r.need(keys[0])
    if (adv := r.flat.get("algorithm.adv_estimator")) is not None:
        group = str(adv).lower() in GROUP_ESTIMATORS
        r.row(
            "algorithm.adv_estimator",
            "group advantage" if group else "(not group-based)",
            "G rollouts a prompt, normalised in the group"
            if group
            else "a critic's advantage: the G rollouts a prompt are still simulated",
        )
    _updates(r, s, mode)
    _cluster(r, s, mode)
    _pipeline(r, s, mode)
    _dynamic(r, s)
    _engine_and_learner(r, s)
    if (T := r.get("trainer.total_training_steps", int)) is not None and T >= 1:
        s["steps"] = T
        r.row("trainer.total_training_steps", "learner steps")
    ignored = sorted(k for k in flat if k not in r.used and k not in r.missing)
    return VerlMapping(path, mode, s, r.rows, ignored, r.missing)


def _updates(r: _Reader, s: dict[str, Any], mode: str) -> None:
    """Optimizer updates per rollout batch K = ``ceil(B / ppo_mini_batch_size) x
    ppo_epochs``: verl's actor (``workers/actor/dp_actor.py``, ``update_policy``) splits
    the batch it trains on into mini-batches of ``ppo_mini_batch_size`` prompts (the
    worker multiplies the field by ``rollout.n`` and divides it by the data-parallel
    ranks; the last mini-batch may be short) and repeats that loop ``ppo_epochs`` times,
    one optimizer step per mini-batch. ``ppo_epochs`` absent: verl's default 1. The
    simulator splits B into K mini-batches of B / K prompts, each prompt trained once: the
    same K updates, the last ``K - 1`` off-policy, with ``ppo_epochs`` > 1 on smaller
    mini-batches than verl's."""
    act = "actor_rollout_ref.actor."
    mini = r.get(act + "ppo_mini_batch_size", int, 1)
    epochs = r.get(act + "ppo_epochs", int, 1)
    B = s.get("prompts")
    if mini is None or B is None:
        r.need(act + "ppo_mini_batch_size")
        return
    per_epoch = math.ceil(B / mini)
    K = s["updates_per_batch"] = per_epoch * (epochs or 1)
    how = f"K = ceil(B {B} / {mini}) x ppo_epochs {epochs or 1} = {K}" + (
        "" if epochs is not None else " (ppo_epochs not set: verl's default 1)"
    )
    if mode == "fully-async":  # the field gave B already: its row says so
        i = next(n for n, m in enumerate(r.rows) if m.field == act + "ppo_mini_batch_size")
        r.rows[i] = Mapped(r.rows[i].field, mini, "prompts B, updates per batch K",
                           f"{r.rows[i].note}; {how}")  # fmt: skip
    else:
        r.row(act + "ppo_mini_batch_size", "updates per batch K", how)
    if epochs is not None:
        r.row(act + "ppo_epochs", "updates per batch K", "each epoch re-runs the mini-batches")


def _cluster(r: _Reader, s: dict[str, Any], mode: str) -> None:
    """GPUs, TP, workers, model, max_num_seqs."""
    arr = "actor_rollout_ref."
    where = "trainer" if mode == "sync" else "rollout"
    nodes = r.get(f"{where}.nnodes", int, 1)
    per = r.get(f"{where}.n_gpus_per_node", int, 1)
    tp = r.get(arr + "rollout.tensor_model_parallel_size", int, 1)
    if tp is not None:
        s["tp"] = tp
        r.row(
            arr + "rollout.tensor_model_parallel_size",
            "TP per worker",
            "roofline --tp (with --gpu)",
        )
    if nodes is not None and per is not None:
        gpus, t = nodes * per, tp or 1
        if gpus % t:
            raise VerlConfigError(
                f"{r.path}: field {arr}rollout.tensor_model_parallel_size: TP {t} does not "
                f"divide the {gpus} generation GPUs of {where}.nnodes x {where}.n_gpus_per_node"
            )
        s["workers"] = gpus // t
        role = "generation GPUs" + (" (colocated with training)" if mode == "sync" else "")
        r.row(f"{where}.nnodes", role, f"{nodes} x {per} = {gpus} GPUs")
        r.row(
            f"{where}.n_gpus_per_node", "generation workers", f"{gpus} GPUs / TP {t} = {gpus // t}"
        )
    else:
        r.need(f"{where}.nnodes", f"{where}.n_gpus_per_node")
    for k in ("trainer.nnodes", "trainer.n_gpus_per_node") if mode != "sync" else ():
        if k in r.flat:
            r.row(k, "learner GPUs", "not applied: the learner time is the scenario's cost model")
    model = r.flat.get(arr + "model.path")
    if model is not None:
        key = _model_key(str(model))
        if key is not None:
            s["model"] = key
        note = (
            f"roofline model {key} with --gpu; {_size(str(model))}"
            if key
            else f"not a roofline model ({', '.join(MODELS)}): cost stays the scenario's; {_size(str(model))}"
        )
        r.row(arr + "model.path", "model", note)
    if (mns := r.get(arr + "rollout.max_num_seqs", int, 1)) is not None:
        s["max_num_seqs"] = mns
        r.row(arr + "rollout.max_num_seqs", "engine.max_num_seqs")


def _pipeline(r: _Reader, s: dict[str, Any], mode: str) -> None:
    """The ``--pipeline`` spec and placement of the mode."""
    if mode == "sync":
        s["pipeline"], s["placement"] = "sync", "colocated"
        if "actor_rollout_ref.hybrid_engine" in r.flat:
            r.row("actor_rollout_ref.hybrid_engine", "placement colocated", "pipeline sync")
        return
    s["placement"] = "separate"
    if mode == "one-step-off":
        s["pipeline"] = "one-step-off:sync=drain"
        return
    a = "async_training."
    F = r.get(a + "staleness_threshold", float, 0.0)
    K = r.get(a + "trigger_parameter_sync_step", int, 1) or 1
    partial = r.get(a + "partial_rollout", bool)
    S = max(K - 1, math.ceil(2 * (1 + (F or 0.0)) * K))
    opts = [f"threshold={F:g}"] if F is not None else []
    opts += [f"sync_every={K}"] if K != 1 else []
    opts += [f"sync={'abort' if partial else 'drain'}"] if partial is not None else []
    s["pipeline"] = ":".join([f"async:{S}", *opts])
    lag = f"S = {S}: verl drops no group for staleness; S = ceil(2 (1 + F) K) lies above the lag"
    if F is not None:
        r.row(a + "staleness_threshold", "pipeline async threshold=F", lag)
    if a + "trigger_parameter_sync_step" in r.flat:
        r.row(a + "trigger_parameter_sync_step", "pipeline async sync_every=K")
    if partial is not None:
        r.row(a + "partial_rollout", "weight-sync mode", "True: abort (resume); False: drain")


def _dynamic(r: _Reader, s: dict[str, Any]) -> None:
    """DAPO's dynamic sampling (``algorithm.filter_groups``)."""
    f = "algorithm.filter_groups."
    if not r.get(f + "enable", bool):
        return
    s["dynamic_sampling"] = True
    r.row(f + "enable", "--dynamic-sampling", "groups of one reward refilled")
    if (m := r.get(f + "max_num_gen_batches", int, 0)) is not None:
        s["max_gen_batches"] = m
        r.row(f + "max_num_gen_batches", "--max-gen-batches", "0: unlimited")
    gen, B = r.get("data.gen_batch_size", int, 1), s.get("prompts")
    if gen is not None and B and gen >= B:
        s["gen_batch_factor"] = gen / B
        r.row("data.gen_batch_size", "--gen-batch-factor", f"{gen} / B {B}")


ROLLOUT_DISPATCH = {"sync": "group", "async": "least_loaded"}
"""verl ``actor_rollout_ref.rollout.mode`` -> the simulator's dispatch rule: ``sync``
(SPMD) splits the batch into equal chunks of prompts, one per vLLM replica, each prompt
sampled ``n`` times there (a group on one worker); ``async`` (agent loop) sends every
request to the server with the fewest requests in flight (verl's
``AsyncLLMServerManager``, least-requests load balancing)."""


def _engine_and_learner(r: _Reader, s: dict[str, Any]) -> None:
    """Token budget, chunked prefill, KV memory share, rollout mode, learning rate."""
    rol = "actor_rollout_ref.rollout."
    if (budget := r.get(rol + "max_num_batched_tokens", int, 1)) is not None:
        s["max_num_batched_tokens"] = budget
        r.row(
            rol + "max_num_batched_tokens", "engine.max_num_batched_tokens", "tokens per iteration"
        )
    if (chunked := r.get(rol + "enable_chunked_prefill", bool)) is not None:
        s["chunked_prefill"] = chunked
        r.row(
            rol + "enable_chunked_prefill",
            "engine.chunked_prefill",
            "with a token budget: long prefills split across iterations",
        )
    if (util := r.get(rol + "gpu_memory_utilization", float)) is not None:
        if not 0.0 < util <= 1.0:
            raise VerlConfigError(
                f"{r.path}: field {rol}gpu_memory_utilization: must be in (0, 1], got {util!r}"
            )
        s["gpu_memory_utilization"] = util
        r.row(
            rol + "gpu_memory_utilization",
            "engine.gpu_memory_utilization",
            "KV cache of the roofline (with --gpu)",
        )
    if (mode := r.flat.get(rol + "mode")) is not None:
        if mode not in ROLLOUT_DISPATCH:
            raise VerlConfigError(
                f"{r.path}: field {rol}mode: expected one of {', '.join(ROLLOUT_DISPATCH)}, "
                f"got {mode!r}"
            )
        s["dispatch"] = ROLLOUT_DISPATCH[mode]
        how = "a prompt's group on one replica" if mode == "sync" else "least requests in flight"
        r.row(rol + "mode", f"dispatch {ROLLOUT_DISPATCH[mode]}", how)
    lr_key = "actor_rollout_ref.actor.optim.lr"
    if (lr := r.get(lr_key, float)) is not None:
        if lr <= 0:
            raise VerlConfigError(f"{r.path}: field {lr_key}: must be > 0, got {lr!r}")
        s["lr"] = lr
        r.row(lr_key, "learning rate", "learning gain lr / lr_ref; staleness margin")


def load(path: str | Path) -> VerlMapping:
    """:func:`map_config` of :func:`read_flat` of ``path``."""
    return map_config(read_flat(path), str(path))


def apply_to_calibration(d: Any, m: VerlMapping) -> Any:
    """A copy of the calibration dict ``d`` (a scenario's JSON, :mod:`sim.scenario`) with
    the cluster and caps of ``m``: ``engine.n_workers`` (generation workers),
    ``engine.max_num_seqs``, ``.max_num_batched_tokens``, ``.chunked_prefill``,
    ``.gpu_memory_utilization``, ``.dispatch`` (from the rollout mode),
    ``lengths.max_response_length`` (the scenario's length model, clipped there),
    ``prompt_tokens`` (at most the prompt cap), ``defaults.prompts``, ``defaults.steps``
    and ``defaults.lr`` (the actor's learning rate); ``provenance.verl_config`` records the file, its mode and
    settings. The length model, cost and pass rates stay the scenario's. A block of the
    wrong type is left as it is, for :func:`sim.scenario.scenario.scenario_from_dict` to
    name (``d`` may be a calibration file's JSON before any check)."""
    import copy

    if not isinstance(d, dict):
        return d
    out = copy.deepcopy(d)
    s = m.settings
    engine, lengths = out.setdefault("engine", {}), out.get("lengths")
    defaults = out.setdefault("defaults", {})
    for key, target, name in (
        ("workers", engine, "n_workers"),
        ("max_num_seqs", engine, "max_num_seqs"),
        ("max_num_batched_tokens", engine, "max_num_batched_tokens"),
        ("chunked_prefill", engine, "chunked_prefill"),
        ("gpu_memory_utilization", engine, "gpu_memory_utilization"),
        ("dispatch", engine, "dispatch"),
        ("lr", defaults, "lr"),
        ("max_response_length", lengths, "max_response_length"),
        ("prompts", defaults, "prompts"),
        ("steps", defaults, "steps"),
    ):
        if key in s and isinstance(target, dict):
            target[name] = s[key]
    tokens = out.get("prompt_tokens")
    if (
        "max_prompt_length" in s
        and isinstance(tokens, (int, float))
        and not isinstance(tokens, bool)
        and float(tokens).is_integer()
    ):
        out["prompt_tokens"] = min(int(tokens), s["max_prompt_length"])
    prov = dict(out.get("provenance") or {})
    prov["verl_config"] = {"path": m.path, "mode": m.mode, "settings": dict(s)}
    out["provenance"] = prov
    return out


def run_settings(m: VerlMapping) -> dict[str, Any]:
    """The ``rolloutlab sim`` options ``m`` sets, by option name (``controllers``,
    ``pipeline``, ``placement``, ``prompts``, ``steps``, ``updates_per_batch``,
    ``dynamic_sampling``, ``max_gen_batches``, ``gen_batch_factor``, ``model``, ``tp``);
    the cluster and caps
    go through :func:`apply_to_calibration` instead."""
    s = m.settings
    keys = ("pipeline", "placement", "prompts", "steps", "updates_per_batch")
    out: dict[str, Any] = {k: s[k] for k in keys if k in s}
    if "group_size" in s:
        out["controllers"] = f"static:{s['group_size']}"
    for k in ("dynamic_sampling", "max_gen_batches", "gen_batch_factor", "model", "tp"):
        if k in s:
            out[k] = s[k]
    return out
