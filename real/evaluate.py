"""Held-out accuracy of the engine's current policy on a fixed problem set."""

from __future__ import annotations

import dataclasses

import numpy as np
from rolloutlab.real.engine import RolloutEngine, RolloutRequest
from rolloutlab.real.sampling import SamplingParams
from rolloutlab.real.task import Problem, is_correct, is_long_format


def evaluate(
    engine: RolloutEngine, problems: list[Problem], params: SamplingParams, seed: int
) -> dict[str, float]:
    """Accuracy of one sampled answer per problem (``params``; problem ``i`` always uses the
    same seed, so successive evaluations differ only by the policy) and of greedy answers.

    Returns ``accuracy`` (sampled), ``greedy_accuracy``, ``long_share`` (sampled answers
    in the long format) and ``response_length_mean`` (tokens, sampled).
    """
    reqs = [
        RolloutRequest(i, tuple(p.prompt_ids), seed * 1_000_003 + i) for i, p in enumerate(problems)
    ]
    sampled = engine.generate(reqs, params)
    greedy = engine.generate(reqs, dataclasses.replace(params, temperature=0.0))
    return {
        "accuracy": float(
            np.mean([is_correct(p, r.response_ids) for p, r in zip(problems, sampled)])
        ),
        "greedy_accuracy": float(
            np.mean([is_correct(p, r.response_ids) for p, r in zip(problems, greedy)])
        ),
        "long_share": float(np.mean([is_long_format(r.response_ids) for r in sampled])),
        "response_length_mean": float(np.mean([len(r.response_ids) for r in sampled])),
    }
