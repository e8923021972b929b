"""Rewards of a step's rollouts, one rule for the synchronous and asynchronous runners.

Interface: :func:`score_groups`. The reward is the task's (exact match + format term,
:mod:`real.tasks`) plus DAPO's overlong penalty (:func:`real.policy.grpo.overlong_penalty`,
PAPERS.md / DAPO "overlong reward shaping") when ``cfg.overlong_cache`` > 0.
"""

from __future__ import annotations

from typing import Any

import torch
from rolloutlab.real.engines.torch_engine import RolloutResult
from rolloutlab.real.policy.grpo import overlong_penalty


def score_groups(
    ops: Any, cfg: Any, problems: list, results: list[RolloutResult], G: int
) -> tuple[torch.Tensor, list[list[int]]]:
    """Rewards ``(B, G)`` (float64) and response lengths ``(B, G)`` (tokens) of ``results``,
    ordered prompt by prompt, ``G`` per prompt (``len(results) == len(problems) * G``).

    ``ops.reward(problem, response_ids)`` is the task reward; ``cfg.max_response_tokens``
    and ``cfg.overlong_cache`` set the overlong penalty. Raises ValueError when the
    results do not hold ``G`` rollouts for every problem.
    """
    if len(results) != len(problems) * G:
        raise ValueError(f"{len(results)} rollouts for {len(problems)} prompts x G = {G}")
    groups = [results[p * G : (p + 1) * G] for p in range(len(problems))]
    rewards = torch.tensor(
        [[ops.reward(problems[p], r.response_ids) for r in g] for p, g in enumerate(groups)],
        dtype=torch.float64,
    )  # (B, G)
    lengths = [[len(r.response_ids) for r in g] for g in groups]
    if cfg.overlong_cache:
        rewards = rewards + overlong_penalty(
            torch.tensor(lengths), cfg.max_response_tokens, cfg.overlong_cache
        )
    return rewards, lengths
