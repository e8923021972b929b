"""SAGC with a per-prompt length history (sim/control/length_history.py)."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.control.controllers import SAGC
from rolloutlab.sim.control.length_history import LengthHistory
from rolloutlab.sim.control.spec import parse_controller
from rolloutlab.testing import check_controller


def test_two_draws_from_one_long_and_three_short_straggle_when_they_differ():
    # one prompt, G = 2 from [1, 1, 1, 50] with replacement: max/median = 50 / 25.5 > 1.5
    # exactly when one draw is the 50: P = 2 * 1/4 * 3/4 = 0.375; G = 1 never straggles
    h = LengthHistory(steps=1)
    h.add([[1, 1, 1, 50]])
    rng = np.random.default_rng(0)
    assert h.straggler_p(rng, 2, 1.5, draws=20000) == pytest.approx(0.375, abs=0.015)
    assert h.straggler_p(rng, 1, 1.5, draws=200) == 0.0


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 50), st.integers(1, 16), st.integers(1, 6))
def test_equal_lengths_never_straggle(length, G, groups):
    h = LengthHistory(steps=2)
    h.add([[length] * 4] * groups)
    assert h.straggler_p(np.random.default_rng(1), G, 1.01, draws=50) == 0.0


def test_a_seen_prompt_draws_its_own_lengths_an_unseen_one_the_pool():
    h = LengthHistory(steps=3)
    h.add([[10, 10, 10, 10], [1, 1, 1, 60]], prompt_ids=[7, 8])
    rng = np.random.default_rng(2)
    assert h.straggler_p(rng, 4, 2.0, prompt_ids=[7], draws=500) == 0.0
    unseen = h.straggler_p(rng, 4, 2.0, prompt_ids=[99], draws=2000)
    # a pool group at random: the flat one never straggles; from [1, 1, 1, 60], four
    # draws straggle (max/median > 2) only with exactly one 60 (two: 60/30.5 < 2):
    # 4 (1/4) (3/4)^3 = 0.421875
    assert unseen == pytest.approx(0.5 * 0.421875, abs=0.03)


def test_the_pool_forgets_old_steps_and_prompts_are_bounded():
    h = LengthHistory(steps=1, max_prompts=2)
    h.add([[1, 1, 1, 60]], prompt_ids=[1])
    h.add([[5, 5, 5, 5], [5, 5, 5, 5]], prompt_ids=[2, 3])
    assert list(h.by_prompt) == [2, 3]
    assert h.straggler_p(np.random.default_rng(0), 4, 2.0, draws=200) == 0.0
    with pytest.raises(ValueError, match="2 prompt ids for 1 groups"):
        h.add([[1]], prompt_ids=[4, 5])


def test_spec_options_and_bad_values():
    ctl = parse_controller("sagc:length_history=4,length_history_n=5")
    assert ctl.length_history == 4 and ctl.length_history_n == 5.0
    assert "prompt_ids" in ctl.observes and ctl.proposes == ("prompt_ids",)
    assert parse_controller("sagc").proposes == ()
    with pytest.raises(ValueError, match="length_history >= 0"):
        parse_controller("sagc:length_history=-1")


def test_the_history_moves_the_draw_of_a_g_never_run():
    # candidates 4/8/16 from 8; only G = 8 has run. The history says 16 always straggles
    # (every prompt's group holds one long response among short ones) and 4 rarely.
    kw = dict(candidates=(4, 8, 16), tau=2.0, seed=3)
    plain, hist = SAGC(**kw), SAGC(**kw, length_history=4, length_history_n=1000.0)
    lengths = [[1] * 15 + [40]] * 8
    for ctl in (plain, hist):
        ctl.observe([g[:8] for g in lengths], prompt_ids=list(range(8)))
    hist._lengths.add(lengths, list(range(8)))  # 16 lengths per prompt seen
    hist.propose(prompt_ids=list(range(8)))
    rows = {r["G"]: r for r in hist.explain()["candidates"]}
    assert rows[16]["p_history"] == 1.0  # 16 draws of 1/16 long: P(no 40) tiny at B = 8
    assert rows[16]["p"] > 0.95
    plain.propose()
    assert "p_history" not in plain.explain()["candidates"][0]


def test_state_round_trip_continues_the_same_proposals():
    a = SAGC(candidates=(4, 8, 16), tau=2.0, length_history=3, seed=5)
    rng = np.random.default_rng(0)
    for step in range(6):
        ids = np.arange(step * 4, step * 4 + 4) % 10
        G = a.propose(prompt_ids=ids)
        a.observe(rng.integers(1, 30, size=(4, G)).tolist(), prompt_ids=ids)
    b = SAGC(candidates=(4, 8, 16), tau=2.0, length_history=3, seed=99)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    ids = np.arange(4)
    assert [a.propose(prompt_ids=ids) for _ in range(5)] == [
        b.propose(prompt_ids=ids) for _ in range(5)
    ]


def test_the_controller_kit_passes_with_a_length_history():
    report = check_controller("sagc:length_history=4", max_examples=5, straggler_steps=400)
    assert report.ok, str(report)
