"""Training pipelines over the simulated engine; they emit the trace tables.

Synchronous pipeline (GRPO/DAPO as in verl's default trainer), per learner step ``t``:
``G_t = controller.propose()``; dispatch ``B`` prompts x ``G_t`` rollouts at once; wait
for the last (the makespan), plus the cost model's per-phase ``gen_overhead_s`` (together:
verl ``timing_s/gen``); learner update; weight sync;
``controller.observe(lengths)``; next step. Policy version = learner version = ``t``.

Prompt stream: step ``t`` uses prompts ``t*B .. t*B+B-1`` (modulo ``dataset_size`` when
set, so prompts recur every epoch) and draws lengths keyed on ``(seed, prompt id, t,
sample)`` (:func:`sim.dynamics.step_lengths`; a model without ``sample_ids`` gets an RNG
seeded by ``(seed, t)``), so controllers compared on one seed see the same prompts and
sample ``j`` of a prompt is the same whatever ``G`` (:mod:`sim.lengths`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl
import simpy
from rolloutlab.sim.batch import Batch
from rolloutlab.sim.controllers import Controller
from rolloutlab.sim.dynamics import prompt_ids_for, step_lengths
from rolloutlab.sim.engine import Engine
from rolloutlab.sim.lengths import finish_reasons
from rolloutlab.sim.scenario import Scenario
from rolloutlab.sim.trace import ROLLOUT_SCHEMA, STEP_SCHEMA


@dataclass(frozen=True)
class RunConfig:
    """One simulated training run."""

    steps: int = 300
    """Learner steps T."""
    prompts: int = 64
    """Prompt batch B (prompts per step)."""
    seed: int = 0
    """Seed of the prompt/length stream (the controller has its own)."""
    run_id: str = "sim"
    """``run_id`` written into the traces."""
    lr: float = 1e-6
    """Learning rate written into the step table (no effect on timing)."""
    dataset_size: int | None = None
    """Prompts in the dataset: prompt ids are taken modulo it, so they recur every epoch
    (``dataset_size / prompts`` steps); ``None`` = a fresh prompt every time."""

    def __post_init__(self) -> None:
        if self.dataset_size is not None and self.dataset_size < self.prompts:
            raise ValueError(
                f"RunConfig: dataset_size ({self.dataset_size}) must be >= prompts ({self.prompts})"
            )
        if self.steps < 1 or self.prompts < 1:
            raise ValueError(f"RunConfig: need steps >= 1 and prompts >= 1, got {self}")


def rollout_columns(
    run_id: str,
    step: int,
    G: int,
    prompt_ids: np.ndarray,
    batch: Batch,
    policy_version: int | np.ndarray,
    learner_version: int | np.ndarray,
    max_response_length: int,
    t_offset: float = 0.0,
) -> dict[str, np.ndarray]:
    """Rollout-table columns (trace schema) of a finished step's :class:`Batch`.

    ``prompt_ids`` is ``(n_prompts,)``; the batch holds ``n_prompts * G`` requests in
    row-major ``(prompt, sample)`` order. ``t_offset`` is added to the batch times.
    Returns a dict of ``(n_prompts * G,)`` arrays (build many steps' columns, then one
    table: :func:`columns_to_rollouts`).
    """
    n = len(batch.response_tokens)
    return {
        "run_id": np.full(n, run_id, dtype=object),
        "step": np.full(n, step, dtype=np.int64),
        "prompt_id": np.repeat(np.asarray(prompt_ids, dtype=np.int64), G),
        "sample_idx": np.tile(np.arange(G, dtype=np.int64), len(prompt_ids)),
        "group_size": np.full(n, G, dtype=np.int64),
        "policy_version": np.broadcast_to(np.asarray(policy_version, dtype=np.int64), n).copy(),
        "learner_version": np.broadcast_to(np.asarray(learner_version, dtype=np.int64), n).copy(),
        "prompt_tokens": batch.prompt_tokens,
        "response_tokens": batch.response_tokens,
        "finish_reason": finish_reasons(batch.response_tokens, max_response_length),
        "worker": batch.worker,
        "t_submit": batch.t_submit + t_offset,
        "t_first_token": batch.t_first_token + t_offset,
        "t_finish": batch.t_finish + t_offset,
    }


def columns_to_rollouts(columns: list[dict[str, np.ndarray]]) -> pl.DataFrame:
    """One rollout table (trace schema) from :func:`rollout_columns` dicts."""
    return pl.DataFrame(
        {k: np.concatenate([c[k] for c in columns]) for k in columns[0]}, schema=ROLLOUT_SCHEMA
    )


def step_record(
    run_id: str,
    step: int,
    t_start: float,
    t_end: float,
    gen_time: float,
    train_time: float,
    sync_time: float,
    lr: float,
    controller: Controller,
) -> dict:
    """The step-table row of one learner step as a dict (sim: no reward, KL or gradients);
    a list of them becomes a table with ``pl.DataFrame(rows, schema=STEP_SCHEMA)``."""
    return {
        "run_id": run_id,
        "step": step,
        "t_start": float(t_start),
        "t_end": float(t_end),
        "gen_time": float(gen_time),
        "train_time": float(train_time),
        "sync_time": float(sync_time),
        "lr": float(lr),
        "reward_mean": None,
        "kl": None,
        "grad_norm": None,
        "grad_cosine": None,
        "controller_state": json.dumps(controller.state_dict()),
    }


def run_sync(
    scenario: Scenario,
    controller: Controller,
    cfg: RunConfig,
    on_step: Callable[[int, int], None] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Simulate ``cfg.steps`` synchronous learner steps; return ``(rollouts, steps)`` tables.

    ``on_step(step, G)`` is called after each step (progress bars). Raises ValueError
    if the controller proposes G < 1.
    """
    env = simpy.Environment()
    engine = Engine(env, scenario.cost, scenario.engine)
    rollouts: list[dict[str, np.ndarray]] = []
    steps: list[dict] = []
    env.process(_sync_process(env, engine, scenario, controller, cfg, rollouts, steps, on_step))
    env.run()
    return columns_to_rollouts(rollouts), pl.DataFrame(steps, schema=STEP_SCHEMA)


def _sync_process(env, engine, scenario, controller, cfg, rollouts, steps, on_step):
    B, cap = cfg.prompts, scenario.lengths.max_response_length
    for t in range(cfg.steps):
        G = int(controller.propose())
        if G < 1:
            raise ValueError(f"controller {controller.name} proposed G={G} at step {t}")
        prompt_ids = prompt_ids_for(t, B, cfg.dataset_size)  # (B,)
        lengths = step_lengths(scenario.lengths, cfg.seed, t, prompt_ids, G)  # (B, G)
        t_start = env.now
        batch = engine.submit(
            np.repeat(prompt_ids, G),
            np.full(B * G, scenario.prompt_tokens),
            lengths.ravel(),
            exclusive=True,
        )
        yield batch.done
        if scenario.cost.gen_overhead_s > 0:
            yield env.timeout(scenario.cost.gen_overhead_s)
        gen_time = env.now - t_start
        tokens = float(lengths.sum() + B * G * scenario.prompt_tokens)
        train_time = scenario.cost.learner_step_s(tokens)
        yield env.timeout(train_time)
        sync_time = scenario.cost.weight_sync_s()
        yield env.timeout(sync_time)
        controller.observe(lengths.tolist())
        rollouts.append(rollout_columns(cfg.run_id, t, G, prompt_ids, batch, t, t, cap))
        steps.append(
            step_record(
                cfg.run_id, t, t_start, env.now, gen_time, train_time, sync_time, cfg.lr, controller
            )
        )
        if on_step is not None:
            on_step(t, G)
