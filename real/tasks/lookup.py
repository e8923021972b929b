"""The lookup task: a multi-turn task whose answer needs a tool.

A problem is a hidden table (a digit for each tag ``a..p``, not in the prompt) and 1 to
``max_queries`` query tags. The prompt names the queries; the model looks each one up by
writing its tag then the tool token ``?``; the engine parks the sequence, the task's tool
returns the digit after an injected latency, the digit is appended (a tool token: not the
policy's, masked out of the loss) and generation resumes. The answer is ``=`` then the
looked-up digits in order, then EOS::

    prompt   <bos> >ac
    response a ? [3] c ? [7] = 3 7 <eos>       [d]: the tool's output, table a=3, c=7

so a rollout has ``queries + 1`` model turns. The tool latency is shifted lognormal,
``min_s + exp(N(log median_s, sigma))``, drawn from the request's seed (same seed, same
latencies). Reward: 1 for the right digits in order after well-formed lookups, else 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rolloutlab.real.tasks.tokenizer import BOS_ID, EOS_ID, TAGS, encode

TOOL_ID = encode("?")[0]
"""The tool-call token: the engine parks a sequence that samples it (``?``)."""
_DIGITS = encode("0123456789")


@dataclass(frozen=True)
class LookupConfig:
    """How lookup problems are drawn and how slow the tool is."""

    max_queries: int = 3
    """Most lookups of a problem (uniform in ``1..max_queries``)."""
    latency_min_s: float = 0.005
    """Tool latency floor (s)."""
    latency_median_s: float = 0.02
    """Median of the lognormal part of the tool latency (s)."""
    latency_sigma: float = 0.75
    """Log-scale spread of the tool latency."""

    def __post_init__(self) -> None:
        if not 1 <= self.max_queries <= len(TAGS):
            raise ValueError(
                f"LookupConfig: max_queries must be in 1..{len(TAGS)}, got {self.max_queries}"
            )
        if not (self.latency_min_s >= 0 and self.latency_median_s > 0 and self.latency_sigma >= 0):
            raise ValueError(
                "LookupConfig: need latency_min_s >= 0, latency_median_s > 0, latency_sigma >= 0"
            )


@dataclass(frozen=True)
class LookupProblem:
    """Hidden ``table`` (one digit per tag ``a..p``) and the ``queries`` (tag indices)."""

    table: tuple[int, ...]
    queries: tuple[int, ...]

    @property
    def prompt_text(self) -> str:
        """E.g. ``">ac"``: ``>`` then the query tags."""
        return ">" + "".join(TAGS[q] for q in self.queries)

    @property
    def prompt_ids(self) -> list[int]:
        """``[BOS] + encode(prompt_text)``."""
        return [BOS_ID] + encode(self.prompt_text)

    def answer(self, tag_id: int) -> list[int]:
        """The tool's output for a lookup of token ``tag_id``: its digit, or nothing when
        ``tag_id`` is no tag."""
        tag_ids = encode(TAGS)
        return [_DIGITS[self.table[tag_ids.index(tag_id)]]] if tag_id in tag_ids else []


def sample_lookup_problems(
    rng: np.random.Generator, cfg: LookupConfig, size: int, exclude: frozenset[str] = frozenset()
) -> list[LookupProblem]:
    """``size`` problems (table digits uniform, 1..max_queries distinct query tags); a
    problem whose prompt is in ``exclude`` (the held-out set) is redrawn."""
    out: list[LookupProblem] = []
    while len(out) < size:
        table = tuple(int(d) for d in rng.integers(0, 10, len(TAGS)))
        k = int(rng.integers(1, cfg.max_queries + 1))
        queries = tuple(int(q) for q in rng.choice(len(TAGS), k, replace=False))
        p = LookupProblem(table, queries)
        if p.prompt_text not in exclude:
            out.append(p)
    return out


def heldout_lookup_problems(
    cfg: LookupConfig, size: int, seed: int = 10_000
) -> list[LookupProblem]:
    """The fixed held-out set (its own seed)."""
    return sample_lookup_problems(np.random.default_rng(seed), cfg, size)


def solution_ids(problem: LookupProblem) -> list[int]:
    """The correct response, tool outputs included, EOS at the end."""
    ids: list[int] = []
    for q in problem.queries:
        tag = encode(TAGS[q])[0]
        ids += [tag, TOOL_ID, *problem.answer(tag)]
    return ids + encode("=" + "".join(str(problem.table[q]) for q in problem.queries)) + [EOS_ID]


def is_correct(problem: LookupProblem, response_ids: list[int]) -> bool:
    """The response is exactly :func:`solution_ids` (lookups in order, then the digits)."""
    return list(response_ids) == solution_ids(problem)


def lookup_reward(problem: LookupProblem, response_ids: list[int]) -> float:
    """``1[correct]`` (the DAPO overlong term is added by the learner)."""
    return float(is_correct(problem, response_ids))


class LookupTool:
    """The tool of one request: ``tool(response_ids) -> (output ids, latency s)``, the
    lookup of the token before the trailing tool token; latencies drawn from ``seed``
    (picklable: the asynchronous runner sends requests to its generator process)."""

    def __init__(self, problem: LookupProblem, cfg: LookupConfig, seed: int):
        self.problem, self.cfg = problem, cfg
        self.rng = np.random.default_rng([seed, 33])

    def __call__(self, response_ids: list[int]) -> tuple[list[int], float]:
        cfg = self.cfg
        tag = response_ids[-2] if len(response_ids) >= 2 else -1
        z = float(self.rng.standard_normal())
        lat = cfg.latency_min_s + float(
            np.exp(np.log(cfg.latency_median_s) + cfg.latency_sigma * z)
        )
        return self.problem.answer(tag), lat


def tool_for(problem: LookupProblem, cfg: LookupConfig, seed: int) -> LookupTool:
    """:class:`LookupTool` of one request (``seed``: the request's sampling seed)."""
    return LookupTool(problem, cfg, seed)
