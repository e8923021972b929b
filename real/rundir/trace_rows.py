"""The rows a real run appends to the trace (:mod:`sim.trace.schema` schema, version 2) per step."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
import torch
from rolloutlab.real.engines.interface import RolloutResult
from rolloutlab.sim.trace import strict_json
from rolloutlab.sim.trace.jsonl import append_durably
from rolloutlab.sim.trace.schema import ROLLOUT_SCHEMA, STEP_SCHEMA


def rollout_rows(
    run_id: str,
    step: int,
    G: int,
    results: Sequence[RolloutResult],
    first_prompt_id: int,
    rewards: torch.Tensor | None = None,
    correct: Sequence[bool] | None = None,
) -> pl.DataFrame:
    """One row per rollout of ``results`` (``n * G``, in group order; group ``p`` is prompt
    ``first_prompt_id + p``); ``rewards`` ``(n, G)`` and ``correct`` ``(n * G,)`` fill the
    v2 columns ``reward`` / ``correct`` when given. Policy and learner version = ``step``
    (synchronous; the asynchronous loop overrides ``policy_version``)."""
    flat = None if rewards is None else rewards.reshape(-1).tolist()
    rows = [
        {
            "run_id": run_id,
            "step": step,
            "prompt_id": first_prompt_id + r.request_id // G,
            "sample_idx": r.request_id % G,
            "group_size": G,
            "policy_version": step,
            "learner_version": step,
            "prompt_tokens": r.prompt_tokens,
            "response_tokens": len(r.response_ids),
            "finish_reason": r.finish_reason,
            "worker": r.worker,
            "t_submit": r.t_submit_s,
            "t_first_token": r.t_first_token_s,
            "t_finish": r.t_finish_s,
            "reward": None if flat is None else flat[i],
            "correct": None if correct is None else bool(correct[i]),
        }
        for i, r in enumerate(results)
    ]
    return pl.DataFrame(rows, schema=ROLLOUT_SCHEMA)


def step_row(
    run_id: str,
    step: int,
    times: tuple[float, float, float, float, float],
    lr: float,
    stats: Any,
    controller_state: dict,
    extra: dict[str, Any],
) -> pl.DataFrame:
    """The step-table row. ``times``: ``(t_start, t_gen, t_train, t_sync, t_end)`` in s on the
    run clock; ``stats``: the learner update's statistics (None without an update);
    ``extra``: the v2 reward columns (:func:`real.runners.refill.sampling_record`, with ``reward_mean``)."""
    t_start, t_gen, t_train, t_sync, t_end = times
    row = {
        "run_id": run_id,
        "step": step,
        "t_start": t_start,
        "t_end": t_end,
        "gen_time": t_gen - t_start,
        "train_time": t_train - t_gen,
        "sync_time": t_sync - t_train,
        "lr": lr,
        "kl": stats.kl if stats else None,
        "grad_norm": stats.grad_norm if stats else None,
        "grad_cosine": stats.grad_cosine if stats else None,
        "controller_state": json.dumps(controller_state),
        **{k: v for k, v in extra.items() if k in STEP_SCHEMA},
    }
    return pl.DataFrame([row], schema=STEP_SCHEMA)


def finish_reason_rows(results: Sequence[RolloutResult], G: int) -> list[list[str]]:
    """``(n, G)`` finish reasons (``"stop"``, ``"length"``, ...) of ``results`` in group
    order: what :func:`sim.control.observation.observe_step` passes as ``finish_reasons``."""
    return [[r.finish_reason for r in results[p : p + G]] for p in range(0, len(results), G)]


def mechanism_metrics(stats: Any) -> dict[str, float]:
    """The collapse-mechanism metrics of one update under verl's names:
    ``actor/entropy`` (nats), ``actor/ppo_kl`` (k1 KL to the behaviour policy),
    ``actor/grad_norm`` (before clipping), ``actor/pg_clipfrac`` (share of tokens PPO's
    clip acts on, or would with the clip off), ``actor/kl_ref`` (k3 KL to the warm start),
    ``actor/log_ratio_abs`` and ``actor/is_weight_mean``. ``stats``: an
    :class:`real.policy.learner.UpdateStats`."""
    return {
        "actor/entropy": stats.entropy,
        "actor/ppo_kl": stats.ppo_kl,
        "actor/grad_norm": stats.grad_norm,
        "actor/pg_clipfrac": stats.clip_frac,
        "actor/kl_ref": stats.kl,
        "actor/log_ratio_abs": stats.log_ratio_abs_mean,
        "actor/is_weight_mean": stats.is_weight_mean,
    }


def learner_row(
    step: int,
    G: int,
    results: Sequence[RolloutResult],
    correct: Sequence[bool],
    n_prompts: int,
    rewards,
    keep,
    stats,
    t_start: float,
    t_end: float,
) -> dict:
    """One ``learner.jsonl`` row of a synchronous step: ``results`` in request order
    (request ``i`` belongs to prompt ``i // G``), ``correct`` per result, ``rewards``
    ``(B, G)`` and ``keep`` ``(B,)`` tensors, the update's ``stats`` (None: no group
    kept), times in seconds from run start. ``group_correct`` is the per-group count of
    correct responses in prompt order (what ``calibrate learning`` fits pass rates from,
    docs/learning.md)."""
    row = {
        "step": step,
        "t_s": t_end,
        "G": G,
        "reward_mean": float(rewards.mean()),
        "accuracy": float(np.mean(correct)),
        "group_correct": np.bincount(
            [r.request_id // G for r in results], weights=correct, minlength=n_prompts
        )
        .astype(int)
        .tolist(),
        "groups_dropped": int((~keep).sum()),
        "step_s": t_end - t_start,
        "response_length_mean": float(np.mean([len(r.response_ids) for r in results])),
    }
    if stats is not None:
        row.update(
            loss=stats.loss,
            pg_loss=stats.pg_loss,
            clip_frac=stats.clip_frac,
            n_tokens=stats.n_tokens,
        )
        row["training/rollout_probs_diff_mean"] = stats.probs_diff_mean
        row["training/rollout_probs_diff_max"] = stats.probs_diff_max
        row.update(mechanism_metrics(stats))
    return row


def engine_request_rows(
    step: int, G: int, results: Sequence[RolloutResult], first_prompt_id: int
) -> list[dict]:
    """The ``engine_requests.jsonl`` rows of one step: what an engine reports per request
    beyond the trace schema (vLLM: ``t_scheduled`` in s from run start, ``preemptions``,
    ``cached_prompt_tokens``), keyed like the rollout rows (``step``, ``prompt_id``,
    ``sample_idx``). Empty when the engine reports none of them (the torch engine)."""
    if all(r.preemptions is None and r.t_scheduled_s is None for r in results):
        return []
    return [
        {
            "step": step,
            "prompt_id": first_prompt_id + r.request_id // G,
            "sample_idx": r.request_id % G,
            "t_submit": r.t_submit_s,
            "t_scheduled": r.t_scheduled_s,
            "t_first_token": r.t_first_token_s,
            "t_finish": r.t_finish_s,
            "preemptions": r.preemptions,
            "cached_prompt_tokens": r.cached_prompt_tokens,
        }
        for r in results
    ]


def append_engine_requests(out, step: int, G: int, results: list, first: int) -> None:
    """Append the step's per-request engine stats (vLLM's scheduling time, preemptions,
    cached prompt tokens) to ``engine_requests.jsonl``; nothing for the torch engine."""
    rows = engine_request_rows(step, G, results, first)
    if rows:
        append_durably(
            out / "engine_requests.jsonl", "".join(strict_json.dumps(r) + "\n" for r in rows)
        )
