"""The real runs' tasks behind one interface, selected by name (``--task``).

| name | module | response length within a group |
|---|---|---|
| ``digit-chain`` | :mod:`real.tasks.digit_chain` | two formats (``n + 3`` or ``4 n + 3`` tokens): at most ~3.5x |
| ``graph-walk`` | :mod:`real.tasks.graph_walk` | a sampled search: one walk can be 10x another |
| ``lookup`` | :mod:`real.tasks.lookup` | multi-turn: 1..3 tool calls, each with a lognormal latency |
| ``arithmetic`` | :mod:`real.tasks.arithmetic` | a pretrained chat model's replies (``--model smollm2-135m`` only) |

A :class:`TaskOps` holds the task's functions bound to the run's task settings; the loops
(:mod:`real.runners.sync`, :mod:`real.runners.async_loop`), the warm start and the evaluation use only it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rolloutlab.real.tasks import arithmetic, digit_chain, lookup
from rolloutlab.real.tasks import graph_walk as walk_task
from rolloutlab.real.tasks.digit_chain import TaskConfig
from rolloutlab.real.tasks.graph_walk import WalkConfig

TASKS = ("digit-chain", "graph-walk", "lookup", "arithmetic")
"""Task names accepted by ``--task``."""


@dataclass(frozen=True)
class TaskOps:
    """One task's functions. ``Problem`` objects expose ``prompt_text`` and ``prompt_ids``."""

    name: str
    settings: Any
    """The task's config dataclass (:class:`real.tasks.digit_chain.TaskConfig` or :class:`real.tasks.graph_walk.WalkConfig`)."""
    sample: Callable[[np.random.Generator, int, frozenset[str]], list]
    """``sample(rng, size, exclude)``: training problems, none whose prompt is in ``exclude``."""
    heldout: Callable[[int], list]
    """``heldout(size)``: the fixed held-out set."""
    reward: Callable[[Any, list[int]], float]
    """``reward(problem, response_ids)``."""
    correct: Callable[[Any, list[int]], bool]
    """``correct(problem, response_ids)``: the verified answer (held-out accuracy)."""
    solutions: Callable[[np.random.Generator, Sequence], list[list[int]]]
    """``solutions(rng, problems)``: warm-start responses (EOS included), one per problem."""
    eval_extra: Callable[[Sequence, Sequence[list[int]]], dict[str, float]]
    """Task-specific held-out metrics of sampled responses (e.g. ``long_share``)."""
    tool: Callable[[Any, int], Callable] | None = None
    """``tool(problem, seed)``: the tool of one request (multi-turn tasks,
    :func:`real.tasks.lookup.tool_for`); None for single-turn tasks."""


def _digit_solutions(cfg: TaskConfig) -> Callable:
    def solutions(rng: np.random.Generator, problems: Sequence) -> list[list[int]]:
        longs = rng.random(len(problems)) < cfg.p_long
        return [p.solution_ids(bool(lg)) for p, lg in zip(problems, longs)]

    return solutions


CHAT_TASKS = ("arithmetic",)
"""Tasks told in natural language through a pretrained model's chat template (the others
use the tiny model's fixed vocabulary, :mod:`real.tasks.tokenizer`)."""


def _arithmetic_ops(cfg: arithmetic.ArithmeticConfig) -> TaskOps:
    from rolloutlab.real.policy import smollm2
    from rolloutlab.real.tasks.tokenizer import EOS_ID

    tokenizer = smollm2.load_tokenizer()
    smollm2.check_token_ids(tokenizer)
    grader = arithmetic.Grader(tokenizer, cfg)
    return TaskOps(
        "arithmetic",
        cfg,
        lambda rng, size, exclude: arithmetic.sample_problems(rng, cfg, tokenizer, size, exclude),
        lambda size: arithmetic.heldout_problems(cfg, tokenizer, size),
        grader.reward,
        grader.correct,
        lambda rng, problems: [grader.solution_ids(p, EOS_ID) for p in problems],
        lambda problems, responses: {"answer_share": grader.answer_share(list(responses))},
    )


def task_ops(
    name: str,
    digit_cfg: TaskConfig,
    walk_cfg: WalkConfig,
    arith_cfg: arithmetic.ArithmeticConfig | None = None,
) -> TaskOps:
    """The :class:`TaskOps` of task ``name`` with its settings.

    ``arithmetic`` loads SmolLM2's tokenizer (:func:`real.policy.smollm2.load_tokenizer`,
    converting the model on first use).
    Raises: ValueError naming an unknown task; for ``arithmetic``, what
    :func:`real.policy.smollm2.ensure_model` raises.
    """
    if name == "arithmetic":
        return _arithmetic_ops(arith_cfg or arithmetic.ArithmeticConfig())
    if name == "digit-chain":
        return TaskOps(
            name,
            digit_cfg,
            lambda rng, size, exclude: digit_chain.sample_problems(rng, digit_cfg, size, exclude),
            lambda size: digit_chain.heldout_problems(digit_cfg, size),
            lambda p, ids: digit_chain.reward(p, ids, digit_cfg),
            digit_chain.is_correct,
            _digit_solutions(digit_cfg),
            lambda problems, responses: {
                "long_share": float(np.mean([digit_chain.is_long_format(r) for r in responses]))
            },
        )
    if name == "graph-walk":
        return TaskOps(
            name,
            walk_cfg,
            lambda rng, size, exclude: walk_task.sample_walk_problems(rng, walk_cfg, size, exclude),
            lambda size: walk_task.heldout_walk_problems(walk_cfg, size),
            walk_task.walk_reward,
            walk_task.is_correct,
            lambda rng, problems: [walk_task.solution_ids(p, rng, walk_cfg) for p in problems],
            lambda problems, responses: {},
        )
    if name == "lookup":
        cfg = lookup.LookupConfig()
        return TaskOps(
            name,
            cfg,
            lambda rng, size, exclude: lookup.sample_lookup_problems(rng, cfg, size, exclude),
            lambda size: lookup.heldout_lookup_problems(cfg, size),
            lookup.lookup_reward,
            lookup.is_correct,
            lambda rng, problems: [lookup.solution_ids(p) for p in problems],
            lambda problems, responses: {},
            lambda problem, seed: lookup.tool_for(problem, cfg, seed),
        )
    raise ValueError(f"unknown task {name!r}; expected one of {', '.join(TASKS)}")
