"""One-step arithmetic word problems for a pretrained chat model, graded by the final number.

A problem is two numbers and one operation told as a short story, e.g.::

    Mia has 12 apples. She buys 7 more. How many apples does Mia have now?
    End your reply with "The answer is N." where N is a number.

The prompt is the chat template of the model's tokenizer around that user message
(system turn and generation prompt as the template writes them). The reply is graded by
its **final number**: the number after the first ``The answer is`` when the reply states
one (a small model often rambles on after it), else its last number (integers, a leading
minus and thousands commas accepted); correct when it equals the answer. The optional format term rewards a reply that states
``The answer is N`` (:data:`ANSWER_RE`). Operands are small (sums and differences of
numbers up to :attr:`ArithmeticConfig.max_value`, products and exact quotients of one-digit
factors), which SmolLM2-135M-Instruct solves part of the time: rewards vary inside a group.

Problems are drawn from a seeded ``numpy`` generator; the held-out set has its own seed
and its prompts are never drawn for training (``exclude``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

OPERATIONS = "+-*/"
NAMES = ("Mia", "Leo", "Ava", "Sam", "Zoe", "Ben", "Ivy", "Max", "Eva", "Tom", "Lily", "Noah")
PRONOUNS = {"Mia": "She", "Ava": "She", "Zoe": "She", "Ivy": "She", "Eva": "She", "Lily": "She"}
ITEMS = ("apples", "pencils", "stickers", "marbles", "cookies", "books", "coins", "shells")
INSTRUCTION = 'End your reply with "The answer is N." where N is a number.'
ANSWER_RE = re.compile(r"answer is\s*:?\s*\$?(-?\d+(?:,\d{3})*(?:\.\d+)?)", re.IGNORECASE)
"""The stated answer (format term): ``The answer is 19``."""
NUMBER_RE = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")


@dataclass(frozen=True)
class ArithmeticConfig:
    """How arithmetic problems are drawn and scored."""

    operations: str = OPERATIONS
    """Operations drawn (uniformly) from ``+-*/``."""
    max_value: int = 20
    """Largest operand of a sum or difference (``>= 2``); products and quotients use
    one-digit factors 2..9."""
    format_weight: float = 0.0
    """Weight of the format term (reply states ``The answer is N``); 0: reward = correctness."""

    def __post_init__(self) -> None:
        if not self.operations or set(self.operations) - set(OPERATIONS):
            raise ValueError(
                f"ArithmeticConfig: operations must be a non-empty subset of {OPERATIONS!r}, "
                f"got {self.operations!r}"
            )
        if self.max_value < 2:
            raise ValueError(f"ArithmeticConfig: max_value must be >= 2, got {self.max_value}")


@dataclass(frozen=True)
class ArithmeticProblem:
    """One problem: its story, its chat-templated prompt ids and the answer."""

    prompt_text: str
    """The user message (story and instruction)."""
    prompt_ids: tuple[int, ...]
    """The chat template's token ids around ``prompt_text``, generation prompt included."""
    answer: int


def story(op: str, a: int, b: int, name: str, item: str) -> tuple[str, int]:
    """``(text, answer)`` of one operation on ``a`` and ``b`` (``a - b >= 0``, ``a / b``
    exact: the caller draws them so)."""
    he = PRONOUNS.get(name, "He")
    if op == "+":
        return (
            f"{name} has {a} {item}. {he} buys {b} more. How many {item} does {name} have now?",
            a + b,
        )
    if op == "-":
        return (
            f"{name} has {a} {item} and gives {b} of them to a friend. How many {item} does {name} have left?",
            a - b,
        )
    if op == "*":
        return (
            f"{name} has {a} bags with {b} {item} in each bag. How many {item} does {name} have in all?",
            a * b,
        )
    return (
        f"{name} shares {a} {item} equally among {b} friends. How many {item} does each friend get?",
        a // b,
    )


def draw(rng: np.random.Generator, cfg: ArithmeticConfig) -> tuple[str, int]:
    """One story and its answer."""
    op = cfg.operations[int(rng.integers(len(cfg.operations)))]
    name = NAMES[int(rng.integers(len(NAMES)))]
    item = ITEMS[int(rng.integers(len(ITEMS)))]
    if op in "+-":
        a, b = (int(x) for x in rng.integers(2, cfg.max_value + 1, 2))
        if op == "-":
            a, b = max(a, b) + 1, min(a, b)  # a > b: something is left
    else:
        a, b = (int(x) for x in rng.integers(2, 10, 2))
        if op == "/":
            a = a * b  # an exact quotient: a / b is the drawn first factor
    return story(op, a, b, name, item)


def chat_prompt_ids(tokenizer, text: str) -> tuple[int, ...]:
    """Token ids of the chat template around one user message, generation prompt included."""
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
    )
    return tuple(tokenizer.encode(rendered, add_special_tokens=False))


def sample_problems(
    rng: np.random.Generator,
    cfg: ArithmeticConfig,
    tokenizer,
    size: int,
    exclude: frozenset[str] = frozenset(),
) -> list[ArithmeticProblem]:
    """``size`` problems; any whose prompt is in ``exclude`` (the held-out set) is redrawn."""
    out: list[ArithmeticProblem] = []
    while len(out) < size:
        text, answer = draw(rng, cfg)
        text = f"{text}\n{INSTRUCTION}"
        if text not in exclude:
            out.append(ArithmeticProblem(text, chat_prompt_ids(tokenizer, text), answer))
    return out


def heldout_problems(
    cfg: ArithmeticConfig, tokenizer, size: int, seed: int = 10_000
) -> list[ArithmeticProblem]:
    """The fixed held-out set (its own seed)."""
    return sample_problems(np.random.default_rng(seed), cfg, tokenizer, size)


def final_number(text: str) -> int | None:
    """The reply's answer as an integer: the number of its first ``The answer is N``
    (:data:`ANSWER_RE`), else its last number (commas dropped); None if there is none or
    it has a fractional part other than zero."""
    stated = ANSWER_RE.search(text)
    found = [stated.group(1)] if stated else NUMBER_RE.findall(text)
    if not found:
        return None
    value = float(found[-1].replace(",", ""))
    return int(value) if value == int(value) else None


def stated_answer(text: str) -> bool:
    """Whether ``text`` states ``The answer is N`` (the format term)."""
    return ANSWER_RE.search(text) is not None


class Grader:
    """Decodes replies with the model's tokenizer and grades them."""

    def __init__(self, tokenizer, cfg: ArithmeticConfig):
        self.tokenizer, self.cfg = tokenizer, cfg

    def text(self, response_ids: list[int]) -> str:
        """The reply's text (special tokens, EOS included, dropped)."""
        return self.tokenizer.decode(list(response_ids), skip_special_tokens=True)

    def correct(self, problem: ArithmeticProblem, response_ids: list[int]) -> bool:
        """The reply's last number equals the answer."""
        return final_number(self.text(response_ids)) == problem.answer

    def reward(self, problem: ArithmeticProblem, response_ids: list[int]) -> float:
        """``1[correct] + format_weight * 1[states the answer]`` (the DAPO overlong term is
        added by the learner)."""
        text = self.text(response_ids)
        r = float(final_number(text) == problem.answer)  # as correct(), decoding once
        if self.cfg.format_weight:
            r += self.cfg.format_weight * float(stated_answer(text))
        return r

    def solution_ids(self, problem: ArithmeticProblem, eos_id: int) -> list[int]:
        """A correct reply (``The answer is N.``), EOS included."""
        ids = self.tokenizer.encode(f"The answer is {problem.answer}.", add_special_tokens=False)
        return list(ids) + [eos_id]

    def answer_share(self, responses: list[list[int]]) -> float:
        """Share of replies that state ``The answer is N``."""
        return float(np.mean([stated_answer(self.text(r)) for r in responses]))
