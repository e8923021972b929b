"""Training pipelines over the simulated engine; they emit the trace tables.

Synchronous pipeline (GRPO/DAPO as in verl's default trainer), per learner step ``t``:
``G_t = controller.propose()`` (:func:`sim.control.observation.propose_step`: with the step's
prompt ids for a controller that asks for them); dispatch ``B`` prompts x ``G_t`` rollouts at once; wait
for the last (the makespan), plus the cost model's per-phase ``gen_overhead_s`` (together:
verl ``timing_s/gen``); learner update; weight sync;
:func:`sim.control.observation.observe_step` (lengths, rewards, times, prompt ids); next step.
Policy version = learner version = ``t``.

With a pass-rate model (``RunConfig.rewards``) each rollout gets a keyed Bernoulli
reward (:mod:`sim.models.rewards`) and the step its reward columns; with dynamic sampling
(``RunConfig.dynamic``, :mod:`sim.pipelines.dynamic_sampling`) the generation phase is repeated
in rounds until B informative groups are kept, each round a generation phase of its own
(its own ``gen_overhead_s``); only kept groups are trained on and written.

Prompt stream: step ``t`` uses prompts ``t*B .. t*B+B-1`` (modulo ``dataset_size`` when
set, so prompts recur every epoch; extra dynamic-sampling rounds take the next prompts
of the stream, :class:`sim.pipelines.dynamic_sampling.PromptStream`) and draws lengths keyed on
``(seed, prompt id, t, sample)`` (:meth:`sim.models.lengths.LengthModel.sample_ids`), so
controllers compared on one seed
see the same prompts and sample ``j`` of a prompt is the same whatever ``G``
(:mod:`sim.models.lengths`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl
import simpy
from rolloutlab.sim.control.contract import Controller
from rolloutlab.sim.control.observation import needs, observe_step, propose_step, reason_json
from rolloutlab.sim.engine.batch import Batch
from rolloutlab.sim.engine.core import Engine
from rolloutlab.sim.models.dynamics import step_lengths
from rolloutlab.sim.models.lengths import finish_reasons
from rolloutlab.sim.models.reward_metrics import step_reward_columns
from rolloutlab.sim.models.rewards import RewardConfig, RewardTracker, check_updates
from rolloutlab.sim.models.step_phases import extra_step_s
from rolloutlab.sim.models.update_log import UpdateLog
from rolloutlab.sim.pipelines.dynamic_sampling import Collector, DynamicSampling, PromptStream
from rolloutlab.sim.pipelines.multi_turn import MultiTurnRun
from rolloutlab.sim.scenario.defaults import ScenarioDefaults
from rolloutlab.sim.scenario.scenario import Scenario
from rolloutlab.sim.trace.schema import STEP_SCHEMA, empty, frame
from rolloutlab.sim.trace.stream import ColumnSpool, RolloutSink


@dataclass(frozen=True)
class RunConfig:
    """One simulated training run."""

    steps: int = ScenarioDefaults.steps
    """Learner steps T."""
    prompts: int = ScenarioDefaults.prompts
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
    rewards: RewardConfig | None = None
    """Pass-rate model and learning parameters; ``None`` = no rewards (the trace then has no reward columns)."""
    dynamic: DynamicSampling | None = None
    """DAPO dynamic sampling; ``None`` = off. Needs ``rewards``."""
    updates_per_batch: int = 1
    """K optimizer updates per rollout batch (mini-batches of B / K prompts; verl's
    ``train_batch_size / ppo_mini_batch_size``): later mini-batches train off-policy
    (:meth:`sim.models.rewards.RewardTracker.learn`). Timing is unchanged (the same tokens
    go through the learner)."""

    def __post_init__(self) -> None:
        if self.dynamic is not None and self.rewards is None:
            raise ValueError(
                "--dynamic-sampling needs rewards: give --pass-rate or a scenario with a "
                "pass_rate block"
            )
        check_updates(self.updates_per_batch, self.prompts)
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
    batch: Batch | BatchRows,
    policy_version: int | np.ndarray,
    learner_version: int | np.ndarray,
    max_response_length: int,
    t_offset: float = 0.0,
    correct: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Rollout-table columns (trace schema) of a finished step's :class:`Batch`.

    ``prompt_ids`` is ``(n_prompts,)``; the batch holds ``n_prompts * G`` requests in
    row-major ``(prompt, sample)`` order. ``t_offset`` is added to the batch times.
    ``correct`` (n_prompts, G) bool, if given, fills ``correct`` and ``reward`` (1.0 /
    0.0); else those columns are left out (null in the table).
    Returns a dict of ``(n_prompts * G,)`` arrays (build many steps' columns, then one
    table: :func:`columns_to_rollouts`).
    """
    n = len(batch.response_tokens)
    extra = {}
    if correct is not None:
        c = np.asarray(correct, dtype=bool).ravel()
        extra = {"reward": c.astype(np.float64), "correct": c}
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
        "finish_reason": reasons
        if (reasons := getattr(batch, "finish_reason", None)) is not None  # multi-turn
        else finish_reasons(batch.response_tokens, max_response_length),
        "worker": batch.worker,
        "t_submit": batch.t_submit + t_offset,
        "t_first_token": batch.t_first_token + t_offset,
        "t_finish": batch.t_finish + t_offset,
        **extra,
    }


class BatchRows:
    """Some rows of a :class:`Batch` (a slice or an index array), in the shape
    :func:`rollout_columns` reads."""

    def __init__(self, batch: Batch, rows: slice | np.ndarray):
        self.prompt_tokens = batch.prompt_tokens[rows]
        self.response_tokens = batch.response_tokens[rows]
        self.worker = batch.worker[rows]
        self.t_submit = batch.t_submit[rows]
        self.t_first_token = batch.t_first_token[rows]
        self.t_finish = batch.t_finish[rows]
        reasons = getattr(batch, "finish_reason", None)
        self.finish_reason = None if reasons is None else reasons[rows]


def group_rows(groups: np.ndarray, G: int) -> np.ndarray:
    """Row indices (row-major (prompt, sample)) of the groups ``groups`` of size ``G``."""
    return (np.asarray(groups, dtype=np.int64)[:, None] * G + np.arange(G)).ravel()


def columns_to_rollouts(columns: list[dict[str, np.ndarray]]) -> pl.DataFrame:
    """One rollout table (trace schema) from :func:`rollout_columns` dicts (reward
    columns null when the dicts have none); an empty table for no dicts."""
    if not columns:
        return empty("rollouts")
    return frame({k: np.concatenate([c[k] for c in columns]) for k in columns[0]}, "rollouts")


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
    rewards: dict | None = None,
    sync_parts: tuple[float, float, float] | None = None,
    phases: tuple[float, float] | None = None,
) -> dict:
    """The step-table row of one learner step as a dict (sim: no KL or gradients);
    ``rewards``: the reward columns (:func:`sim.models.reward_metrics.step_reward_columns`),
    null when ``None``; ``sync_parts``: ``(pause, drain, transfer)`` seconds of the
    weight sync (:mod:`sim.pipelines.weight_sync`), by default ``(0, 0, sync_time)``;
    ``phases``: ``(reward wait, periodic)`` seconds (:mod:`sim.models.step_phases`), null
    when ``None``. A list of rows becomes a table with
    ``pl.DataFrame(rows, schema=STEP_SCHEMA)``."""
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
        "controller_reason": reason_json(controller),
        **(rewards or {}),
        **dict(
            zip(
                ("sync_pause_s", "sync_drain_s", "sync_transfer_s"),
                map(float, sync_parts or (0.0, 0.0, sync_time)),
            )
        ),
        **(
            {}
            if phases is None
            else {"reward_wait_s": float(phases[0]), "periodic_s": float(phases[1])}
        ),
    }


def run_sync(
    scenario: Scenario,
    controller: Controller,
    cfg: RunConfig,
    on_step: Callable[[int, int], None] | None = None,
    turns: list[pl.DataFrame] | None = None,
    rollout_path=None,
    log: UpdateLog | None = None,
) -> tuple[pl.DataFrame | None, pl.DataFrame]:
    """Simulate ``cfg.steps`` synchronous learner steps; return ``(rollouts, steps)`` tables.

    ``on_step(step, G)`` is called after each step (progress bars). With a scenario's
    ``multi_turn`` block the rollouts are multi-turn (:mod:`sim.pipelines.multi_turn`) and
    each step's turns table is appended to ``turns`` when given. ``rollout_path``:
    stream the rollout table to that parquet file a few steps at a time
    (:class:`sim.trace.stream.ColumnSpool`; returned as ``None``). ``log``: the learning
    model's per-update rows (:class:`sim.models.update_log.UpdateLog`). Raises ValueError
    if the controller proposes G < 1, or for a ``multi_turn`` block on paged workers.
    """
    env = simpy.Environment()
    engine = Engine(env, scenario.cost, scenario.engine)
    spool = (
        None
        if rollout_path is None
        else ColumnSpool(RolloutSink(rollout_path), columns_to_rollouts)
    )
    rollouts: list[dict[str, np.ndarray]] | ColumnSpool = [] if spool is None else spool
    steps: list[dict] = []
    mt = MultiTurnRun(env, engine, scenario) if scenario.multi_turn is not None else None
    env.process(
        _sync_process(env, engine, scenario, controller, cfg, rollouts, steps, on_step, mt, log)
    )
    env.run()
    if mt is not None and turns is not None:
        turns.extend(mt.tables)
    table = columns_to_rollouts(rollouts) if isinstance(rollouts, list) else rollouts.close()
    return table, pl.DataFrame(steps, schema=STEP_SCHEMA)


def _sync_process(
    env, engine, scenario, controller, cfg, rollouts, steps, on_step, mt=None, log=None
):
    B, cap = cfg.prompts, scenario.lengths.max_response_length
    tracker = RewardTracker(cfg.rewards, cfg.seed, cfg.lr, B, cfg.updates_per_batch, log)
    stream = PromptStream(cfg.dataset_size)
    for t in range(cfg.steps):
        col = Collector(B, cfg.dynamic)
        n = col.next_count()
        G = propose_step(controller, stream.peek(n))  # the first round's prompts
        if G < 1:
            raise ValueError(f"controller {controller.name} proposed G={G} at step {t}")
        rounds = []  # (prompt ids (n,), lengths (n, G), batch, correct (n, G) | None, kept)
        t_start = env.now
        while n:
            prompt_ids = stream.take(n)
            lengths = step_lengths(scenario.lengths, cfg.seed, t, prompt_ids, G)  # (n, G)
            if mt is None:
                batch = engine.submit(
                    np.repeat(prompt_ids, G),
                    np.full(n * G, scenario.prompt_tokens),
                    lengths.ravel(),
                    exclusive=True,
                    step=t,
                )
                yield batch.done
            else:  # tokens generated over all turns from here on
                batch = mt.submit(cfg.seed, t, prompt_ids, G)
                yield batch.done
                lengths = mt.collect(cfg.run_id, t, prompt_ids, G, batch)
            if scenario.cost.gen_overhead_s > 0:
                yield env.timeout(scenario.cost.gen_overhead_s)
            correct = tracker.draw(t, prompt_ids, G, lengths) if tracker.enabled else None
            rounds.append((prompt_ids, lengths, batch, correct, col.add(correct, n)))
            n = col.next_count()
        gen_time = env.now - t_start
        train_time = sync_time = 0.0
        if col.kept:  # nothing kept (dynamic-sampling abort): no update, no sync
            tokens = float(
                sum(int(r[1][r[4]].sum()) for r in rounds) + col.kept * G * scenario.prompt_tokens
            )
            train_time = scenario.cost.learner_step_s(tokens)
            yield env.timeout(train_time)
        phases = None
        if scenario.step_phases is not None:
            t_fin = np.concatenate([r[2].t_finish for r in rounds]) - t_start  # (n_generated,)
            phases = extra_step_s(scenario.step_phases, t, cfg.seed, t_fin, gen_time, train_time)
            yield env.timeout(phases[0] + phases[1])
        if col.kept:
            sync_time = scenario.cost.weight_sync_s()
            yield env.timeout(sync_time)
        reward_cols = _finish_rounds(rounds, G, col, tracker, t) if tracker.enabled else None
        all_lengths = rounds[0][1] if len(rounds) == 1 else np.concatenate([r[1] for r in rounds])
        observe_step(
            controller,
            all_lengths.tolist(),
            rewards=None if reward_cols is None else reward_cols.pop("_rewards"),
            gen_time_s=gen_time,
            step_time_s=env.now - t_start,
            prompt_ids=np.concatenate([r[0] for r in rounds]),
            finish_reasons=_reasons(rounds, all_lengths, cap)
            if needs(controller, "finish_reasons")
            else None,
            learner_time_s=train_time,
            wall_clock_s=env.now,
        )
        for ids, _, batch, correct, kept in rounds:
            if len(kept) == len(ids):  # every group kept: the whole batch, as it is
                rollouts.append(
                    rollout_columns(cfg.run_id, t, G, ids, batch, t, t, cap, 0.0, correct)
                )
            elif len(kept):
                rows = BatchRows(batch, group_rows(kept, G))
                sub = None if correct is None else correct[kept]
                rollouts.append(
                    rollout_columns(cfg.run_id, t, G, ids[kept], rows, t, t, cap, 0.0, sub)
                )
        steps.append(
            step_record(
                cfg.run_id, t, t_start, env.now, gen_time, train_time, sync_time, cfg.lr,
                controller, reward_cols, phases=phases,
            )
        )  # fmt: skip
        if on_step is not None:
            on_step(t, G)


def _reasons(rounds, all_lengths: np.ndarray, cap: int) -> np.ndarray:
    """Finish reasons of a step's rollouts, ``all_lengths``' shape: the multi-turn
    batches' own (``tool_timeout`` among them), else from the lengths and the cap."""
    if getattr(rounds[0][2], "finish_reason", None) is None:
        return finish_reasons(all_lengths, cap)
    return np.concatenate([r[2].finish_reason for r in rounds]).reshape(all_lengths.shape)


def _finish_rounds(rounds, G: int, col: Collector, tracker: RewardTracker, t: int) -> dict:
    """Reward step columns of a step's rounds, plus ``_rewards`` (every generated group's
    rewards, (n, G) float, for the controller); updates the learning model with the
    kept groups. ``rounds``: ``(ids, lengths, batch, correct, kept)`` tuples."""
    wasted = 0.0
    for ids, _, batch, _, kept in rounds:
        dropped = np.setdiff1d(np.arange(len(ids)), kept)
        if dropped.size:
            r = group_rows(dropped, G)
            wasted += float((batch.t_finish[r] - batch.t_submit[r]).sum())
    rewards = np.concatenate([r[3] for r in rounds]).astype(np.float64)  # (n_generated, G)
    if col.kept:
        tracker.learn([r[3][k].astype(np.float64) for r in rounds for k in r[4]], t)
    cols = step_reward_columns(list(rewards), col.kept, col.rounds, wasted, col.abort)
    cols["_rewards"] = rewards
    return cols
