"""The digit-chain task (:mod:`real.tasks.digit_chain`) in the form a framework trainer takes:
a ``datasets.Dataset`` of prompts and a reward function over completion token ids.

Used by the TRL tests, the three-loop bench and the docs' example, so a framework run and
``rolloutlab real sync`` train on the same problems with the same reward.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from rolloutlab.real.tasks.digit_chain import Problem, TaskConfig, reward, sample_problems


def digit_chain_rows(n: int, seed: int, cfg: TaskConfig | None = None) -> dict[str, list]:
    """``n`` problems drawn with ``seed``: columns ``prompt`` (text, e.g. ``"A4B7C2?"``)
    and ``digits`` (the problem's digits, what the reward needs)."""
    problems = sample_problems(np.random.default_rng(seed), cfg or TaskConfig(), n)
    return {
        "prompt": [p.prompt_text for p in problems],
        "digits": [list(p.digits) for p in problems],
    }


def digit_chain_dataset(n: int, seed: int, cfg: TaskConfig | None = None):
    """:func:`digit_chain_rows` as a ``datasets.Dataset`` (imports datasets)."""
    from datasets import Dataset

    return Dataset.from_dict(digit_chain_rows(n, seed, cfg))


def make_digit_chain_reward(cfg: TaskConfig | None = None):
    """A TRL reward function: ``reward(completion_ids=..., digits=..., **kwargs) -> list[float]``,
    the task's reward (:func:`real.tasks.digit_chain.reward`) of each completion's token ids."""
    task = cfg or TaskConfig()

    def digit_chain_reward(completion_ids: list[list[int]], digits: list, **_: Any) -> list[float]:
        return [
            reward(Problem(tuple(d)), list(ids), task) for ids, d in zip(completion_ids, digits)
        ]

    return digit_chain_reward
