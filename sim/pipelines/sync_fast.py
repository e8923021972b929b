"""The synchronous pipeline on the fast path (:mod:`sim.engine.fastpath` kernels): the same
prompts, lengths, rewards and tables as :func:`sim.pipelines.sync.run_sync`, times equal to
float rounding; steps of an open-loop controller are timed in vectorised blocks.
A dynamic-sampling step (:func:`rounds_step`) times each generation round with
:func:`sim.engine.fastpath.step_times` from the end of the previous one, as the SimPy pipeline
chains its rounds.

Why this is a second step loop and not the SimPy one with another engine: the SimPy loop
(:func:`sim.pipelines.sync.run_sync`) is a generator that waits on one engine batch per
step; here an open-loop controller's ``T`` steps are drawn, timed and written as one
``(T, B, G)`` block (one kernel call, no per-step Python), which a per-step generator
cannot express. What the two share is written once and imported: the prompt stream and
dynamic-sampling collector (:mod:`sim.pipelines.dynamic_sampling`), the keyed lengths
(:meth:`sim.models.lengths.LengthModel.sample_ids`), the reward draw
(:class:`sim.models.rewards.RewardTracker`), the controller calls
(:mod:`sim.control.observation`), the kept-group rows (:func:`sim.pipelines.sync.group_rows`)
and the trace schema; the step tables are built column-wise here (a block at a time), and
the tests hold the two loops to the same tables (``tests/test_fastpath.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl
from rolloutlab.sim.control.contract import Controller
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.control.observation import (
    needs,
    observe_step,
    propose_step,
    reason_json,
    wants,
)
from rolloutlab.sim.engine.fastpath import block_times, step_times
from rolloutlab.sim.models.lengths import finish_reasons
from rolloutlab.sim.models.reward_metrics import step_reward_columns
from rolloutlab.sim.models.rewards import RewardTracker
from rolloutlab.sim.models.step_phases import extra_step_s
from rolloutlab.sim.models.update_log import UpdateLog
from rolloutlab.sim.pipelines.dynamic_sampling import Collector, PromptStream
from rolloutlab.sim.pipelines.sync import group_rows
from rolloutlab.sim.trace.schema import (
    NULLABLE_COLUMNS,
    ROLLOUT_SCHEMA,
    STEP_SCHEMA,
    with_v2_columns,
)
from rolloutlab.sim.trace.stream import RolloutSink

CHUNK_ROWS = 1 << 17
"""Rollouts timed per vectorised block by default: ~30 arrays of 1 MiB at peak, while the
per-block Python overhead (~1 ms) stays small against the arithmetic."""


def run_sync_fast(
    scenario,
    controller: Controller,
    cfg,
    on_step: Callable[[int, int], None] | None = None,
    rollout_path=None,
    chunk_steps: int | None = None,
    log: UpdateLog | None = None,
) -> tuple[pl.DataFrame | None, pl.DataFrame]:
    """:func:`sim.pipelines.sync.run_sync` on the fast path: same prompts, lengths, rewards and
    tables (times equal to float rounding).

    A :class:`~sim.control.controllers.StaticG` controller is open-loop, so ``chunk_steps`` steps
    are drawn and timed in one vectorised call (default: as many as make
    :data:`CHUNK_ROWS` rollouts; rewards are drawn step by step when pass rates move with
    training) unless dynamic sampling is on; other controllers go step by step.
    ``rollout_path``: stream the rollout table to that parquet file (returned as
    ``None``) instead of keeping it in memory; ``log`` as ``run_sync``'s. Raises ValueError for a paged engine
    config or a proposed G < 1.
    """
    if scenario.engine.paged:
        raise ValueError(
            "fast path: KV blocks / token budget need the SimPy engine (--engine simpy)"
        )
    B = cfg.prompts
    tracker = RewardTracker(cfg.rewards, cfg.seed, cfg.lr, B, cfg.updates_per_batch, log)
    sink = RolloutSink(rollout_path)
    phase_cols = ("reward_wait_s", "periodic_s") if scenario.step_phases is not None else ()
    cols: dict[str, list] = {k: [] for k in _STEP_COLUMNS + phase_cols}
    reward_rows: list[dict] = []
    state = FastState(t_now=0.0, rr=0, stream=PromptStream(cfg.dataset_size))
    step, pending, pending_rows = 0, [], 0  # per-block columns not yet in a frame
    while step < cfg.steps:
        first = B if cfg.dynamic is None else Collector(B, cfg.dynamic).next_count()
        G = propose_step(controller, state.stream.peek(first))  # the next step's prompts
        if G < 1:
            raise ValueError(f"controller {controller.name} proposed G={G} at step {step}")
        # G never depends on what it observes, nor on the prompts it is proposed for
        open_loop = isinstance(controller, StaticG) and not getattr(controller, "proposes", ())
        if cfg.dynamic is not None:
            block = rounds_step(scenario, controller, cfg, tracker, state, step, G)
        else:
            per_chunk = chunk_steps or max(1, CHUNK_ROWS // (B * G))
            T = min(per_chunk, cfg.steps - step) if open_loop else 1
            block = _block_step(scenario, controller, cfg, tracker, state, step, G, T, open_loop)
        step_cols, rows, rew, n_rows = block
        for k in cols:
            cols[k].extend(step_cols[k])
        reward_rows.extend(rew)
        if on_step is not None:
            for t in step_cols["step"]:
                on_step(t, G)
        pending.extend(rows)
        pending_rows += n_rows
        step += len(step_cols["step"])
        if pending and (pending_rows >= CHUNK_ROWS or step >= cfg.steps):
            # one frame per ~CHUNK_ROWS rollouts
            sink.add(
                _rollout_frame(
                    pending,
                    cfg.run_id,
                    scenario.prompt_tokens,
                    scenario.lengths.max_response_length,
                )
            )
            pending, pending_rows = [], 0
    n = len(cols["step"])
    nulls = ("reward_mean", "kl", "grad_norm", "grad_cosine")
    extra = (
        {k: [r[k] for r in reward_rows] for k in reward_rows[0]}
        if reward_rows
        else {k: [None] * n for k in nulls}
    )
    steps = (
        pl.DataFrame(
            {
                **cols,
                "run_id": [cfg.run_id] * n,
                "lr": [float(cfg.lr)] * n,
                **{k: [None] * n for k in nulls},
                **extra,
                "sync_pause_s": [0.0] * n,  # nothing in flight at a synchronous sync
                "sync_drain_s": [0.0] * n,
                "sync_transfer_s": list(cols["sync_time"]),
            },
            schema_overrides={k: v for k, v in STEP_SCHEMA.items()},
        )
        .pipe(with_v2_columns, "steps")
        .select(list(STEP_SCHEMA))
        .cast(STEP_SCHEMA)
    )
    return sink.close(), steps


_STEP_COLUMNS = (
    "step",
    "t_start",
    "t_end",
    "gen_time",
    "train_time",
    "sync_time",
    "controller_state",
    "controller_reason",
)


@dataclass
class FastState:
    """Clock, dispatcher round-robin position and prompt stream carried across steps."""

    t_now: float
    rr: int
    stream: PromptStream


def draw_lengths(scenario, seed: int, ts: np.ndarray, ids: np.ndarray, G: int) -> np.ndarray:
    """(T, n, G) lengths of steps ``ts`` (T,) for prompts ``ids`` (T, n), in one call
    (:meth:`sim.models.lengths.LengthModel.sample_ids` broadcasts the step)."""
    return scenario.lengths.sample_ids(seed, ts[:, None], ids, G)


def _block_step(scenario, controller, cfg, tracker, state, step, G, T, open_loop):
    """``T`` steps of one round each (no dynamic sampling), timed in one call.

    Returns ``(step columns, rollout blocks, reward rows, rollouts)``."""
    B, cost = cfg.prompts, scenario.cost
    prompt_tokens = np.full(B, scenario.prompt_tokens, dtype=np.int64)
    ts = np.arange(step, step + T)
    ids = state.stream.take(B, rows=T)  # (T, B)
    lengths = draw_lengths(scenario, cfg.seed, ts, ids, G)  # (T, B, G)
    worker, t_first, t_fin, state.rr = block_times(
        lengths, prompt_tokens, cost, scenario.engine, state.rr, step
    )
    gen = t_fin.max(axis=1) + cost.gen_overhead_s  # (T,) makespan + per-phase overhead
    tokens = lengths.sum(axis=(1, 2)) + B * G * scenario.prompt_tokens  # (T,)
    train = np.asarray(cost.learner_step_s(tokens.astype(np.float64)), dtype=np.float64)  # (T,)
    sync = cost.weight_sync_s()
    phases = _block_phases(scenario, cfg.seed, ts, t_fin, gen, train)  # (T, 2) | None
    # sequential sums, as the SimPy clock adds them: t_end_i = ((t_start_i + gen_i) + train_i) + sync
    # (with step phases: (((t_start_i + gen_i) + train_i) + phases_i) + sync);
    # np.cumsum is a strict left-to-right accumulate, so interleaving gives the same floats
    k = 3 if phases is None else 4
    terms = np.empty(k * T + 1)
    terms[0], terms[1::k], terms[2::k], terms[k::k] = state.t_now, gen, train, sync
    if phases is not None:
        terms[3::k] = phases.sum(axis=1)
    clock = np.cumsum(terms)
    t_start, t_end = clock[:-1:k], clock[k::k]
    state.t_now = float(t_end[-1])
    correct, reward_rows = None, []
    if tracker.enabled and tracker.model is None:  # pass rates fixed: one draw for the block
        correct = tracker.draw(ts, ids, G, lengths)  # (T, B, G)
    elif tracker.enabled:  # pass rates move: step by step (timing does not depend on them)
        correct = np.empty(lengths.shape, dtype=bool)
        for i in range(T):
            correct[i] = tracker.draw(int(ts[i]), ids[i], G, lengths[i])
            tracker.learn(list(correct[i].astype(np.float64)), int(ts[i]))
    rewards = None if correct is None else correct.astype(np.float64)
    if rewards is not None:
        reward_rows = [step_reward_columns(rewards[i], B) for i in range(T)]
    if open_loop and not wants(controller):  # open_loop: a StaticG, which has observe_steps
        states = controller.observe_steps(lengths)
        reasons = [reason_json(controller)] * T
    else:
        states, reasons = [], []
        cap = scenario.lengths.max_response_length
        want_reasons = needs(controller, "finish_reasons")
        for i in range(T):
            observe_step(
                controller,
                lengths[i] if open_loop else lengths[i].tolist(),
                rewards=None if rewards is None else rewards[i],
                gen_time_s=float(gen[i]),
                step_time_s=float(t_end[i] - t_start[i]),
                prompt_ids=ids[i],
                finish_reasons=finish_reasons(lengths[i], cap) if want_reasons else None,
                learner_time_s=float(train[i]),
                wall_clock_s=float(t_end[i]),
            )
            states.append(json.dumps(controller.state_dict()))
            reasons.append(reason_json(controller))
    step_cols = dict(
        zip(
            _STEP_COLUMNS,
            (
                ts.tolist(),
                t_start.tolist(),
                t_end.tolist(),
                gen.tolist(),
                train.tolist(),
                [sync] * T,
                states,
                reasons,
            ),
        )
    )
    if phases is not None:
        step_cols["reward_wait_s"] = phases[:, 0].tolist()
        step_cols["periodic_s"] = phases[:, 1].tolist()
    block = _block_columns(ts, ids, G, lengths, worker, t_start, t_first, t_fin, correct)
    return step_cols, [block], reward_rows, T * B * G


def _block_phases(scenario, seed, ts, t_fin, gen, train) -> np.ndarray | None:
    """``(T, 2)`` reward wait and periodic seconds of steps ``ts`` (``None`` without
    step phases); ``t_fin`` ``(T, n)`` finish times from each step's start."""
    if scenario.step_phases is None:
        return None
    return np.array(
        [
            extra_step_s(
                scenario.step_phases, int(t), seed, t_fin[i], float(gen[i]), float(train[i])
            )
            for i, t in enumerate(ts)
        ]
    ).reshape(len(ts), 2)


def rounds_step(scenario, controller, cfg, tracker, state, t, G):
    """One step with dynamic sampling: generation rounds until B informative groups are
    kept (:class:`sim.pipelines.dynamic_sampling.Collector`), each timed by :func:`step_times` from
    the end of the previous one. Returns ``(step columns, rollout blocks, reward rows, rollouts)`` as the fast path's block step does."""
    cost, P = scenario.cost, scenario.prompt_tokens
    cap = scenario.lengths.max_response_length
    col = Collector(cfg.prompts, cfg.dynamic)
    t_start = now = state.t_now
    blocks, kept_rewards, all_rewards, all_lengths, all_ids = [], [], [], [], []
    wasted, n_rows = 0.0, 0
    finishes: list[np.ndarray] = []  # (n * G,) absolute finish times per round
    while n := col.next_count():
        ids = state.stream.take(n)
        lengths = draw_lengths(scenario, cfg.seed, np.array([t]), ids[None], G)[0]  # (n, G)
        worker, t_first, t_fin, state.rr = step_times(
            lengths, np.full(n, P, dtype=np.int64), cost, scenario.engine, state.rr, t
        )
        correct = tracker.draw(t, ids, G, lengths)
        kept = col.add(correct, n)
        rows = group_rows(kept, G)
        dropped = np.ones(n * G, dtype=bool)
        dropped[rows] = False
        wasted += float(t_fin[dropped].sum())  # t_submit is the round start: t_finish - t_submit
        if len(kept):
            blocks.append(
                _block_columns(
                    np.array([t]),
                    ids[kept][None],
                    G,
                    lengths[kept][None],
                    worker[rows][None],
                    np.array([now]),
                    t_first[rows][None],
                    t_fin[rows][None],
                    correct[kept][None],
                )
            )
            n_rows += len(rows)
        rewards = correct.astype(np.float64)
        kept_rewards.extend(rewards[kept])
        all_rewards.append(rewards)
        all_lengths.append(lengths)
        all_ids.append(ids)
        finishes.append(now + t_fin)
        now = now + float(t_fin.max())
        if cost.gen_overhead_s > 0:
            now = now + cost.gen_overhead_s
    gen = now - t_start
    train = sync = 0.0
    if col.kept:  # nothing kept (abort): no update, no sync
        tokens = sum(int(b["response_tokens"].sum()) for b in blocks) + col.kept * G * P
        train = float(cost.learner_step_s(float(tokens)))
    phases = None
    if scenario.step_phases is not None:
        t_fin_all = np.concatenate(finishes) - t_start  # (n_generated,)
        phases = extra_step_s(scenario.step_phases, t, cfg.seed, t_fin_all, gen, train)
    if col.kept:
        sync = cost.weight_sync_s()
        now = now + train
        if phases is not None:
            now = now + (phases[0] + phases[1])
        now = now + sync
        tracker.learn(kept_rewards, t)
    elif phases is not None:
        now = now + (phases[0] + phases[1])
    state.t_now = now
    rewards = np.concatenate(all_rewards)
    reward_cols = step_reward_columns(rewards, col.kept, col.rounds, wasted, col.abort)
    observe_step(
        controller,
        np.concatenate(all_lengths).tolist(),
        rewards=rewards,
        gen_time_s=gen,
        step_time_s=now - t_start,
        prompt_ids=np.concatenate(all_ids),
        finish_reasons=finish_reasons(np.concatenate(all_lengths), cap)
        if needs(controller, "finish_reasons")
        else None,
        learner_time_s=train,
        wall_clock_s=now,
    )
    step_cols = dict(
        zip(
            _STEP_COLUMNS,
            (
                [t],
                [t_start],
                [now],
                [gen],
                [train],
                [sync],
                [json.dumps(controller.state_dict())],
                [reason_json(controller)],
            ),
        )
    )
    if phases is not None:
        step_cols["reward_wait_s"], step_cols["periodic_s"] = [phases[0]], [phases[1]]
    return step_cols, blocks, [reward_cols], n_rows


def _block_columns(
    ts, ids, G, lengths, worker, t_start, t_first, t_fin, correct=None
) -> dict[str, np.ndarray]:
    """Flat (T * B * G,) per-rollout columns of ``T`` steps with one ``G``; arrays are
    (T,), (T, B[, G]) and (T, B*G); ``correct`` (T, B, G) bool or ``None``."""
    T, B = ids.shape
    n = B * G
    extra = {}
    if correct is not None:
        c = correct.reshape(-1)
        extra = {"reward": c.astype(np.float64), "correct": c}
    return {
        "step": np.repeat(ts, n),
        "prompt_id": np.repeat(ids.reshape(-1), G),
        "sample_idx": np.tile(np.arange(G, dtype=np.int64), T * B),
        "group_size": np.full(T * n, G, dtype=np.int64),
        "response_tokens": lengths.reshape(-1),
        "worker": worker.reshape(-1).astype(np.int64),
        "t_submit": np.repeat(t_start, n),
        "t_first_token": (t_first + t_start[:, None]).reshape(-1),
        "t_finish": (t_fin + t_start[:, None]).reshape(-1),
        **extra,
    }


def _rollout_frame(
    blocks: list[dict[str, np.ndarray]], run_id: str, prompt_tokens: int, cap: int
) -> pl.DataFrame:
    """Rollout rows (trace schema) of consecutive blocks of :func:`_block_columns`, in one
    frame (why: a frame per step cost ~1 ms, more than timing the step, for controllers
    that go step by step). Every prompt has ``prompt_tokens`` tokens."""
    cols = {
        k: np.concatenate([b[k] for b in blocks]) if len(blocks) > 1 else blocks[0][k]
        for k in blocks[0]
    }
    exprs = {
        "policy_version": pl.col("step"),
        "learner_version": pl.col("step"),
        "prompt_tokens": pl.lit(int(prompt_tokens), dtype=pl.Int64),
        "run_id": pl.lit(run_id, dtype=pl.String),
        "finish_reason": pl.when(pl.col("response_tokens") >= cap)
        .then(pl.lit("length"))
        .otherwise(pl.lit("stop")),
        **{
            k: pl.lit(None, dtype=ROLLOUT_SCHEMA[k])
            for k in NULLABLE_COLUMNS["rollouts"]
            if k not in cols
        },
    }
    # one eager select, every expression already of its schema type (why: on blocks of
    # ~10^4 rows a second call or a lazy query's planning costs more than the columns)
    return pl.DataFrame(cols).select(
        [exprs[k].alias(k) if k in exprs else pl.col(k) for k in ROLLOUT_SCHEMA]
    )
