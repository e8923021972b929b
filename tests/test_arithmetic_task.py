"""The arithmetic word-problem task: stories whose answers check out, grading by the final
number, the held-out split, and the task's wiring through the chat template."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rolloutlab.real.rundir.config import ConfigError, SyncConfig
from rolloutlab.real.tasks import arithmetic as ar

OPS = {"buys": "+", "gives": "-", "bags": "*", "shares": "/"}


class _CharTokenizer:
    """A tokenizer stand-in: one id per character, a two-line chat template."""

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        assert not tokenize and add_generation_prompt
        return f"<user>{messages[0]['content']}</user><assistant>"

    def encode(self, text, add_special_tokens):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens):
        return "".join(chr(i) for i in ids if i != 2)


def _solve(text: str) -> int:
    """Reads the story back: its two numbers and the operation its verb names."""
    a, b = (int(x) for x in re.findall(r"\d+", text.split("\n")[0]))
    op = next(o for word, o in OPS.items() if word in text)
    return {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op] if op != "/" or a % b == 0 else -1


@given(st.integers(0, 2**32 - 1), st.sampled_from(["+-*/", "+", "-", "*", "/", "+-"]))
def test_every_story_states_numbers_whose_operation_gives_the_answer(seed, ops):
    cfg = ar.ArithmeticConfig(operations=ops, max_value=30)
    (p,) = ar.sample_problems(np.random.default_rng(seed), cfg, _CharTokenizer(), 1)
    assert _solve(p.prompt_text) == p.answer >= 1
    assert p.prompt_text.endswith(ar.INSTRUCTION)
    assert "".join(map(chr, p.prompt_ids)) == f"<user>{p.prompt_text}</user><assistant>"


@pytest.mark.parametrize(
    ("reply", "number"),
    [
        ("18 + 4 = 22 coins. The answer is 22.", 22),
        ("The answer is 10.\n\nA puzzle called 10:10:10 has 3 parts.", 10),  # stated first
        ("Mia has 7 - 2 = 5 pencils left.", 5),
        ("So 1,250 in all.", 1250),
        ("The answer is: 4.0", 4),
        ("about 2.5 each", None),
        ("no number here", None),
    ],
)
def test_final_number_prefers_the_stated_answer_then_the_last_number(reply, number):
    assert ar.final_number(reply) == number


def test_grader_scores_correctness_plus_the_format_term():
    tok = _CharTokenizer()
    (p,) = ar.sample_problems(np.random.default_rng(3), ar.ArithmeticConfig(), tok, 1)
    good = tok.encode(f"So it is {p.answer}. The answer is {p.answer}.", False) + [2]
    bare = tok.encode(f"It is {p.answer}", False) + [2]
    wrong = tok.encode(f"The answer is {p.answer + 1}.", False) + [2]
    plain, shaped = (
        ar.Grader(tok, ar.ArithmeticConfig()),
        ar.Grader(tok, ar.ArithmeticConfig(format_weight=0.25)),
    )
    assert [plain.reward(p, r) for r in (good, bare, wrong)] == [1.0, 1.0, 0.0]
    assert [shaped.reward(p, r) for r in (good, bare, wrong)] == [1.25, 1.0, 0.25]
    assert plain.correct(p, good) and not plain.correct(p, wrong)
    assert plain.answer_share([good, bare, wrong]) == pytest.approx(2 / 3)
    assert plain.correct(p, plain.solution_ids(p, eos_id=2))


def test_heldout_set_is_fixed_and_never_drawn_for_training():
    tok, cfg = _CharTokenizer(), ar.ArithmeticConfig(operations="+", max_value=4)
    held = ar.heldout_problems(cfg, tok, 6)
    assert held == ar.heldout_problems(cfg, tok, 6)
    exclude = frozenset(p.prompt_text for p in held)
    train = ar.sample_problems(np.random.default_rng(0), cfg, tok, 200, exclude)
    assert not exclude & {p.prompt_text for p in train}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"operations": "+x"}, "operations"),
        ({"operations": ""}, "operations"),
        ({"max_value": 1}, "max_value"),
    ],
)
def test_bad_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ar.ArithmeticConfig(**kwargs)


@pytest.mark.parametrize(
    ("model", "task"),
    [("tiny", "arithmetic"), ("smollm2-135m", "digit-chain"), ("gpt2", "arithmetic")],
)
def test_a_task_runs_only_on_the_model_whose_vocabulary_it_uses(model, task):
    with pytest.raises(ConfigError, match="model"):
        SyncConfig(model=model, task_name=task)


def test_config_round_trips_the_model_and_the_task_settings():
    cfg = SyncConfig(model="smollm2-135m", task_name="arithmetic")
    again = SyncConfig.from_dict(cfg.to_dict())
    assert again == cfg and again.arithmetic == ar.ArithmeticConfig()
    assert (
        SyncConfig.from_dict(
            {k: v for k, v in SyncConfig().to_dict().items() if k != "model"}
        ).model
        == "tiny"
    )
