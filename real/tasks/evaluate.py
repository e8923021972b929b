"""Held-out accuracy of the engine's current policy on a fixed problem set, and the
wall-clock time a run needs to reach a target accuracy."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
from rolloutlab.real.engines.interface import RolloutEngine, RolloutRequest
from rolloutlab.real.engines.sampling import SamplingParams
from rolloutlab.real.tasks.registry import TaskOps


def evaluate(
    engine: RolloutEngine, problems: list, params: SamplingParams, seed: int, ops: TaskOps
) -> dict[str, float]:
    """Accuracy of one sampled answer per problem (``params``; problem ``i`` always uses the
    same seed, so successive evaluations differ only by the policy) and of greedy answers,
    verified by ``ops.correct``.

    Returns ``accuracy`` (sampled), ``greedy_accuracy``, ``response_length_mean`` (tokens,
    sampled) and the task's extras (``long_share`` for ``digit-chain``).
    """

    def reqs() -> list[RolloutRequest]:  # (fresh tools: a tool draws its latencies in turn)
        seeds = [seed * 1_000_003 + i for i in range(len(problems))]
        tools = [None if ops.tool is None else ops.tool(p, s) for p, s in zip(problems, seeds)]
        return [
            RolloutRequest(i, tuple(p.prompt_ids), s, t)
            for i, (p, s, t) in enumerate(zip(problems, seeds, tools))
        ]

    sampled = engine.generate(reqs(), params)
    greedy = engine.generate(reqs(), dataclasses.replace(params, temperature=0.0))
    return {
        "accuracy": float(
            np.mean([ops.correct(p, r.response_ids) for p, r in zip(problems, sampled)])
        ),
        "greedy_accuracy": float(
            np.mean([ops.correct(p, r.response_ids) for p, r in zip(problems, greedy)])
        ),
        **ops.eval_extra(problems, [r.response_ids for r in sampled]),
        "response_length_mean": float(np.mean([len(r.response_ids) for r in sampled])),
    }


def time_to_accuracy(evals: Sequence[dict[str, Any]], target: float) -> float | None:
    """First wall-clock time (s from run start, the ``t_s`` of an ``eval.jsonl`` row) at
    which the held-out sampled ``accuracy`` is at least ``target``; None if never.

    ``evals``: rows in time order. ``t_s`` is taken when the evaluation finished, so the
    time of evaluating (the same for every controller) is included.
    Raises: ValueError unless ``0 < target <= 1``.
    """
    if not 0 < target <= 1:
        raise ValueError(f"target accuracy must be in (0, 1], got {target}")
    for row in evals:
        if row["accuracy"] >= target:
            return float(row["t_s"])
    return None
