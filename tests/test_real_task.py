"""The digit-chain task and its tokenizer (no torch needed)."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from rolloutlab.real.tasks.digit_chain import (
    Problem,
    TaskConfig,
    heldout_problems,
    is_correct,
    is_long_format,
    reward,
    sample_n_digits,
    sample_problems,
)
from rolloutlab.real.tasks.tokenizer import EOS_ID, decode, encode

digits = st.lists(st.integers(0, 9), min_size=1, max_size=16).map(tuple)


@given(digits, st.booleans())
def test_worked_solutions_are_correct_with_their_documented_length(ds, long):
    p = Problem(ds)
    sol = p.solution_ids(long)
    assert is_correct(p, sol)
    assert is_long_format(sol) == long
    assert len(sol) == (4 * len(ds) + 3 if long else len(ds) + 3)


@given(digits)
def test_prompt_text_round_trips_through_the_tokenizer(ds):
    p = Problem(ds)
    assert decode(p.prompt_ids) == p.prompt_text
    assert len(p.prompt_ids) == len(ds) + 2  # BOS, one token per digit, '?'


def test_a_wrong_answer_or_a_missing_eos_scores_zero():
    p = Problem((4, 7, 2))  # answer 3
    assert p.solution_text(False) == "413>3"
    assert not is_correct(p, encode("413>4") + [EOS_ID])
    assert not is_correct(p, encode("413>3"))  # no EOS: truncated
    assert not is_correct(p, encode("41>3>3") + [EOS_ID])


def test_format_term_adds_to_the_reward_of_a_well_formed_wrong_answer():
    p = Problem((4, 7, 2))
    wrong = encode("413>4") + [EOS_ID]
    assert reward(p, wrong, TaskConfig()) == 0.0
    assert reward(p, wrong, TaskConfig(format_weight=0.1)) == 0.1
    assert reward(p, p.solution_ids(True), TaskConfig(format_weight=0.1)) == 1.1


def test_lengths_have_a_long_tail_within_bounds():
    cfg = TaskConfig()
    n = sample_n_digits(np.random.default_rng(0), cfg, 20_000)
    assert n.min() >= cfg.n_min and n.max() <= cfg.n_max
    assert np.median(n) == cfg.n_median
    assert np.quantile(n, 0.99) >= 2.5 * np.median(n)


def test_training_problems_never_repeat_a_heldout_prompt():
    cfg = TaskConfig()
    held = frozenset(p.prompt_text for p in heldout_problems(cfg, 256))
    train = sample_problems(np.random.default_rng(1), cfg, 2000, held)
    assert not held & {p.prompt_text for p in train}
