"""The digit-chain task: running sums mod 10 of a tagged digit list, with a scratchpad.

A problem is a list of ``n`` digits ``d_0..d_{n-1}``; the answer is
``(d_0 + ... + d_{n-1}) mod 10``. The prompt tags every digit with its position
(``A``, ``B``, ...)::

    prompt   <bos> A4 B7 C2 D9 ?             one tag+digit token per digit
    long     a4=4b7=1c2=3d9=2>2<eos>      4 tokens per step: tag, digit, '=', running sum
    short    4132>2<eos>                  1 token per step: the running sum only

Both scratchpads are correct; their lengths are ``4n + 3`` and ``n + 3`` tokens
(EOS included). The long one is easier for a small model (each step writes a tag, looks
up the prompt token of that tag, and adds two nearby numbers), the short one must count positions implicitly. The supervised warm start
shows both (:attr:`TaskConfig.p_long`), so the policy's length varies within a group
(the format is sampled), and across prompts ``n`` has a long tail (log-normal, clipped),
so a larger ``G`` raises the chance of a straggler. Reward: exact match of the final
answer, plus an optional format term (see :func:`reward`). Length distribution:
docs/real_task.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rolloutlab.real.tasks.tokenizer import BOS_ID, EOS_ID, PROMPT_TAGS, TAGS, decode, encode


@dataclass(frozen=True)
class TaskConfig:
    """How problems are drawn and scored."""

    n_median: float = 4.0
    """Median number of digits ``n`` (the log-normal's ``exp(mu)``)."""
    n_sigma: float = 0.55
    """Log-normal sigma of ``n``: the length tail. 0.55 puts ~5 % of prompts above 2x the median."""
    n_min: int = 2
    """Fewest digits in a problem."""
    n_max: int = 16
    """Most digits in a problem (at most ``len(TAGS)`` = 16)."""
    p_long: float = 0.5
    """Share of long-scratchpad solutions in the warm-start data."""
    format_weight: float = 0.0
    """Weight of the format term in the reward (0: reward = exact-match correctness)."""

    def __post_init__(self) -> None:
        if not (1 <= self.n_min <= self.n_max <= len(TAGS)):
            raise ValueError(
                f"TaskConfig: need 1 <= n_min <= n_max <= {len(TAGS)}, got "
                f"n_min={self.n_min}, n_max={self.n_max}"
            )
        if not (0.0 <= self.p_long <= 1.0):
            raise ValueError(f"TaskConfig: p_long must be in [0, 1], got {self.p_long}")

    @property
    def max_solution_tokens(self) -> int:
        """Longest correct response (long format, ``n_max`` digits, EOS included)."""
        return 4 * self.n_max + 3


@dataclass(frozen=True)
class Problem:
    """One problem: its digits, prompt token ids and the answer digit."""

    digits: tuple[int, ...]

    @property
    def answer(self) -> int:
        """``sum(digits) mod 10``."""
        return sum(self.digits) % 10

    @property
    def prompt_text(self) -> str:
        """E.g. ``"A4B7C2?"`` (three tag+digit tokens and ``?``)."""
        return "".join(f"{t}{d}" for t, d in zip(PROMPT_TAGS, self.digits)) + "?"

    @property
    def prompt_ids(self) -> list[int]:
        """``[BOS] + encode(prompt_text)``."""
        return [BOS_ID] + encode(self.prompt_text)

    def solution_text(self, long: bool) -> str:
        """The worked solution in the long or short format (no EOS)."""
        sums = np.cumsum(self.digits) % 10
        if long:
            steps = "".join(f"{t}{d}={s}" for t, d, s in zip(TAGS, self.digits, sums))
        else:
            steps = "".join(str(s) for s in sums)
        return f"{steps}>{self.answer}"

    def solution_ids(self, long: bool) -> list[int]:
        """Token ids of the solution, EOS included."""
        return encode(self.solution_text(long)) + [EOS_ID]


def sample_n_digits(rng: np.random.Generator, cfg: TaskConfig, size: int) -> np.ndarray:
    """``(size,)`` numbers of digits: ``round(exp(N(log n_median, n_sigma)))`` clipped."""
    n = np.rint(np.exp(rng.normal(np.log(cfg.n_median), cfg.n_sigma, size)))
    return np.clip(n, cfg.n_min, cfg.n_max).astype(np.int64)


def sample_problems(
    rng: np.random.Generator, cfg: TaskConfig, size: int, exclude: frozenset[str] = frozenset()
) -> list[Problem]:
    """``size`` problems; any whose prompt is in ``exclude`` (held-out set) is redrawn."""
    out: list[Problem] = []
    while len(out) < size:
        for n in sample_n_digits(rng, cfg, size - len(out)):
            p = Problem(tuple(int(d) for d in rng.integers(0, 10, int(n))))
            if p.prompt_text not in exclude:
                out.append(p)
    return out


def heldout_problems(cfg: TaskConfig, size: int, seed: int = 10_000) -> list[Problem]:
    """The fixed held-out evaluation set (its own seed, independent of the run's)."""
    return sample_problems(np.random.default_rng(seed), cfg, size)


def is_well_formed(response_ids: list[int]) -> bool:
    """Ends with EOS and holds exactly one ``>`` followed by exactly one digit."""
    if not response_ids or response_ids[-1] != EOS_ID:
        return False
    text = decode(response_ids)
    head, sep, tail = text.partition(">")
    return bool(sep) and ">" not in tail and len(tail) == 1 and tail.isdigit()


def is_correct(problem: Problem, response_ids: list[int]) -> bool:
    """Exact match: a well-formed response whose final answer is ``problem.answer``."""
    return is_well_formed(response_ids) and decode(response_ids).endswith(f">{problem.answer}")


def reward(problem: Problem, response_ids: list[int], cfg: TaskConfig) -> float:
    """``1[correct] + format_weight * 1[well formed]`` (the DAPO overlong term is added
    by the learner, :func:`real.policy.grpo.overlong_penalty`)."""
    r = float(is_correct(problem, response_ids))
    if cfg.format_weight:
        r += cfg.format_weight * float(is_well_formed(response_ids))
    return r


def is_long_format(response_ids: list[int]) -> bool:
    """Whether a response uses the long scratchpad (its first token is a tag)."""
    text = decode(response_ids)
    return bool(text) and text[0] in TAGS
