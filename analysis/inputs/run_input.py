"""Reading one run directory for the comparisons: its two trace tables, its
configuration, the engine it ran on, and each step's layout.

A run directory (``rolloutlab real sync``, or the simulator) holds ``rollouts.parquet``
and ``steps.parquet`` (or the ``.jsonl`` a live run appends) in the trace schema
(:mod:`sim.trace.schema`, which checks the schema version of each file) and ``config.json``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from rolloutlab.sim.engine.core import EngineConfig
from rolloutlab.sim.trace import schema as trace
from rolloutlab.sim.trace import strict_json
from rolloutlab.sim.trace.jsonl import read_rows
from rolloutlab.sim.trace.metrics import DEFAULT_TAU

TURN_TIMES = (
    "t_submit", "t_first_token", "t_finish", "t_tool_request", "t_tool_start", "t_tool_end"
)  # fmt: skip


class RunInputError(ValueError):
    """A run directory that cannot be compared; the message names the file and what is wrong."""


CLOCKS = ("wall", "cpu")
"""What "time" is: the run's wall clock, or its process CPU time per step (the
``cpu_gen_s``, ``cpu_train_s``, ``cpu_sync_s`` fields of ``learner.jsonl``), which the
load of a shared machine does not stretch."""

CPU_PHASES = ("cpu_gen_s", "cpu_train_s", "cpu_sync_s")
"""The per-step process CPU seconds ``real sync`` records in ``learner.jsonl``."""


@dataclass(frozen=True)
class RunData:
    """One run, read and checked."""

    path: Path
    """The run directory."""
    rollouts: pl.DataFrame
    """Rollout table (trace schema), consumed rows only, sorted by step, prompt, sample."""
    steps: pl.DataFrame
    """Step table (trace schema), sorted by step."""
    config: dict
    """``config.json`` as written by the run (``{}`` when absent)."""
    engine: EngineConfig
    """The generation engine as the simulator models it: workers seen in the trace,
    ``max_num_seqs`` = the run's capacity, no prefix caching (the torch engine prefills
    every request)."""
    tau: float
    """Straggler threshold: the controller spec's ``tau=``, else the config's ``tau``."""
    max_response_length: int
    """Response cap (tokens): config ``max_response_length`` (``max_response_tokens`` in runs
    written before it took that name), else the longest response."""
    turns: pl.DataFrame | None = None
    """The run's ``turns.parquet`` (:data:`sim.trace.turns.TURN_SCHEMA`) when it has one
    (a multi-turn task), else None."""
    batching: str = "continuous"
    """How the run's engine batched (:data:`sim.engine.static_batch.BATCHING`): config
    ``engine_mode`` ``continuous``, or ``static`` (``static`` when finished rows leave the
    batch, as in the torch engine; ``padded`` when the config says ``batch_padding``, or
    for a TRL run, whose ``transformers.generate`` keeps them until the batch ends)."""


def read_table(run_dir: Path, kind: str) -> pl.DataFrame:
    """``run_dir``'s ``kind`` table (``"rollouts"`` or ``"steps"``): the parquet of a
    finished run, else the JSONL a live run appends. Raises :class:`RunInputError` when
    neither exists; :class:`sim.trace.schema.TraceError` on a bad file."""
    for suffix in ("parquet", "jsonl"):
        path = run_dir / f"{kind}.{suffix}"
        if path.exists():
            return trace.read(path, kind)
    raise RunInputError(f"{run_dir}: no {kind}.parquet or {kind}.jsonl (is this a run directory?)")


def read_object(path: Path, error: type[Exception] = RunInputError) -> dict:
    """The JSON object in ``path`` (strict JSON: no NaN). Raises ``error`` naming the file
    when it cannot be read, is not JSON or is not an object."""
    try:
        d = strict_json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise error(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(d, dict):
        raise error(f"{path}: expected a JSON object, got {type(d).__name__}")
    return d


def real_run_config(run_dir: str | Path) -> dict:
    """``run_dir/config.json`` of a real run as written (``{}`` when there is none).

    Raises :class:`RunInputError` naming the file when it is not a JSON object, or when it
    was written by a simulator command (``sim``, ``sweep``, ...: a ``command`` key and no
    ``config``), whose folder holds no real run to compare.
    """
    path = Path(run_dir) / "config.json"
    if not path.exists():
        return {}
    raw = read_object(path)
    if "config" not in raw and raw.get("command"):
        raise RunInputError(
            f"{path}: written by `rolloutlab {raw['command']}` (a simulator output), not by "
            "a real run; give the folder of `rolloutlab real sync` or `real async`"
        )
    return raw


def _tau(cfg: dict) -> float:
    spec = str(cfg.get("controller", ""))
    kind, _, args = spec.partition(":")
    for item in args.split(",") if kind in ("sagc", "lagc") else ():  # a user's tau is its own
        key, _, val = item.partition("=")
        if key.strip() == "tau":
            return float(val)
    return float(cfg.get("tau", DEFAULT_TAU))


def load_run(run_dir: str | Path, capacity: int | None = None) -> RunData:
    """Read and check a run directory (module docstring).

    ``capacity`` overrides the slots per worker (else ``config.capacity`` or
    ``max_num_seqs``). Raises :class:`RunInputError` on a missing directory or table, a
    run without steps, rollouts of a step the step table lacks, a step whose groups are
    not all of one size, an unknown ``engine_mode`` or a static multi-turn run, no capacity anywhere, or a
    simulator's folder (:func:`real_run_config`);
    :class:`sim.trace.schema.TraceError` on a bad trace file (schema version, columns, values).
    """
    path = Path(run_dir)
    if not path.is_dir():
        raise RunInputError(f"{path}: not a directory")
    cfg_path = path / "config.json"
    raw = real_run_config(path)
    cfg = raw.get("config", raw)
    rollouts = read_table(path, "rollouts")
    steps = read_table(path, "steps").sort("step")
    if steps.height == 0:
        raise RunInputError(f"{path}: the step table has no step (did the run finish a step?)")
    rollouts = rollouts.filter(pl.col("finish_reason") != "abort").sort(
        "step", "prompt_id", "sample_idx"
    )
    if rollouts.height == 0:
        raise RunInputError(f"{path}: the rollout table has no consumed rollout")
    orphan = set(rollouts["step"].unique().to_list()) - set(steps["step"].to_list())
    if orphan:
        raise RunInputError(
            f"{path}: rollouts of step(s) {sorted(orphan)[:5]} have no row in the step table"
        )
    mode = cfg.get("engine_mode", "continuous")
    if mode not in ("continuous", "static"):
        raise RunInputError(f"{cfg_path}: engine_mode {mode!r}; expected 'continuous' or 'static'")
    padded = bool(cfg.get("batch_padding", cfg.get("framework") == "trl"))
    batching = "continuous" if mode == "continuous" else "padded" if padded else "static"
    slots = capacity or cfg.get("capacity") or cfg.get("max_num_seqs")
    if not slots:
        raise RunInputError(f"{cfg_path}: no 'capacity' or 'max_num_seqs'; pass --max-num-seqs")
    engine = EngineConfig(
        n_workers=int(rollouts["worker"].max()) + 1, max_num_seqs=int(slots), prefix_caching=False
    )
    # runs written before the key took the simulator's name hold max_response_tokens
    cap = int(
        cfg.get("max_response_length")
        or cfg.get("max_response_tokens")
        or rollouts["response_tokens"].max()
    )
    turns = pl.read_parquet(path / "turns.parquet") if (path / "turns.parquet").exists() else None
    if turns is not None and batching != "continuous":
        raise RunInputError(
            f"{cfg_path}: a multi-turn run with engine_mode 'static'; multi-turn steps are "
            "modelled with continuous batching only"
        )
    return RunData(path, rollouts, steps, raw, engine, _tau(cfg), cap, turns, batching)


@dataclass(frozen=True)
class StepLayout:
    """One step's rollouts as the engine saw them."""

    step: int
    lengths: np.ndarray
    """``(n_prompts, G)`` response lengths (tokens), prompts in submit order."""
    prompt_tokens: np.ndarray
    """``(n_prompts,)`` prompt lengths (tokens)."""
    finish_s: np.ndarray
    """``(n_prompts * G,)`` measured ``t_finish`` minus the step's first ``t_submit`` (s),
    row-major (prompt, sample)."""


def step_layouts(run: RunData) -> list[StepLayout]:
    """Every step of ``run`` as a :class:`StepLayout`, in step order.

    Raises :class:`RunInputError` naming the step whose groups differ in size or one of
    whose rollouts was submitted after the step's first token (not a synchronous step).
    """
    out = []
    for (step,), df in run.rollouts.group_by(["step"], maintain_order=True):
        sizes = df.group_by("prompt_id").len()["len"]
        G = int(sizes[0])
        if (sizes != G).any() or (df["group_size"] != G).any():
            raise RunInputError(
                f"{run.path}: step {step}: groups of sizes {sorted(set(sizes.to_list()))}; "
                "expected one group size per step"
            )
        # One submit: every request queued before the engine produced the step's first
        # token. (vLLM queues a generate call's requests one by one, a few ms apart; the
        # step then starts at its first request, as the makespan is defined.)
        t_submit = df["t_submit"].to_numpy()
        if t_submit.max() > df["t_first_token"].min():
            raise RunInputError(
                f"{run.path}: step {step}: a rollout was submitted after the step's first "
                "token; only synchronous steps (one submit) are compared"
            )
        n = df.height // G
        out.append(
            StepLayout(
                int(step),
                df["response_tokens"].to_numpy().reshape(n, G),
                df["prompt_tokens"].to_numpy().reshape(n, G)[:, 0],
                df["t_finish"].to_numpy() - t_submit.min(),
            )
        )
    return out


def cpu_phases(run_dir: str | Path, n_steps: int) -> dict[str, np.ndarray]:
    """:data:`CPU_PHASES` -> ``(n_steps,)`` process CPU seconds per step, from the run's
    ``learner.jsonl``.

    Raises :class:`RunInputError` naming the file when it is missing, has another number
    of rows than the run has steps, or lacks a field on some step (a simulator folder, or a
    run from before the fields were recorded)."""
    path = Path(run_dir) / "learner.jsonl"
    rows = read_rows(path) if path.exists() else []
    if len(rows) != n_steps or any(n not in r for r in rows for n in CPU_PHASES):
        raise RunInputError(
            f"{path}: fields {', '.join(CPU_PHASES)} missing on some step (a simulator folder, "
            "or a run from before they were recorded): use --clock wall or rerun it"
        )
    return {n: np.array([r[n] for r in rows], float) for n in CPU_PHASES}


def rescaled_rollouts(
    run: RunData, rate: np.ndarray, gen_time: np.ndarray
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(rollouts, steps)`` of ``run`` with each step's rollout times from its first
    submit multiplied by ``rate[i]`` and its ``gen_time`` set to ``gen_time[i]`` (both
    ``(n_steps,)``, in step-table order)."""
    scale = pl.DataFrame({"step": run.steps["step"], "_scale": rate})
    t0 = pl.col("t_submit").min().over("step")
    rollouts = (
        run.rollouts.join(scale, on="step", how="left")
        .with_columns(
            (t0 + (pl.col(c) - t0) * pl.col("_scale")).alias(c)
            for c in ("t_submit", "t_first_token", "t_finish")
        )
        .drop("_scale")
    )
    return rollouts, run.steps.with_columns(pl.Series("gen_time", gen_time))


def on_cpu_clock(run: RunData) -> RunData:
    """``run`` with each step's rollout times on the process CPU clock: times from the
    step's first submit scaled by the step's ``cpu_gen_s / gen_time`` (the generation
    phase's CPU seconds over its wall seconds), so a step slowed by another process's load
    gets its unloaded length back.

    Only where generation runs on this process's CPU: the torch engine, or vLLM on CPU with
    its engine core in the run's process (``engine.json``: ``cuda_device`` null,
    ``in_process`` true, as ``--engine vllm`` starts it). Raises :class:`RunInputError`
    naming the run otherwise (a GPU's time is not the process's CPU time) and as
    :func:`cpu_phases`."""
    engine = run.config.get("config", run.config).get("engine", "torch")
    if engine != "torch":
        info_path = run.path / "engine.json"
        info = read_object(info_path) if info_path.exists() else {}
        on_cpu = info.get("cuda_device") is None and info.get("config", {}).get("in_process")
        if engine != "vllm" or not on_cpu:
            raise RunInputError(
                f"{run.path}: --clock cpu needs generation on this process's CPU (the torch "
                f"engine, or vLLM on CPU in process per engine.json); this run used {engine!r}"
                f"{'' if info else ' without an engine.json'}: use --clock wall"
            )
    gen_cpu = cpu_phases(run.path, run.steps.height)["cpu_gen_s"]
    rate = gen_cpu / run.steps["gen_time"].to_numpy()
    scale = pl.DataFrame({"step": run.steps["step"], "_scale": rate})
    rollouts, steps = rescaled_rollouts(run, rate, gen_cpu)
    turns = run.turns
    if turns is not None:  # same map, the tool's wall-clock sleeps included (docs/multi_turn.md)
        t0s = run.rollouts.group_by("step").agg(pl.col("t_submit").min().alias("_t0"))
        turns = (
            turns.join(scale, on="step", how="left")
            .join(t0s, on="step", how="left")
            .with_columns(
                (pl.col("_t0") + (pl.col(c) - pl.col("_t0")) * pl.col("_scale")).alias(c)
                for c in TURN_TIMES
            )
            .drop("_scale", "_t0")
        )
    return dataclasses.replace(run, rollouts=rollouts, steps=steps, turns=turns)
