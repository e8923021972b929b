"""The graph-walk task: generated problems and solutions verify, wrong walks do not (no torch)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.real.tasks.digit_chain import TaskConfig
from rolloutlab.real.tasks.graph_walk import (
    WalkConfig,
    WalkProblem,
    draw_problem,
    heldout_walk_problems,
    is_correct,
    sample_walk_problems,
    solution_ids,
)
from rolloutlab.real.tasks.registry import TASKS, task_ops
from rolloutlab.real.tasks.tokenizer import EOS_ID, decode, encode

seeds = st.integers(0, 2**32 - 1)
CFG = WalkConfig()


@settings(max_examples=30, deadline=None)
@given(seeds)
def test_every_generated_solution_verifies(seed):
    rng = np.random.default_rng(seed)
    p = draw_problem(rng, CFG)
    sol = solution_ids(p, rng, CFG)
    assert is_correct(p, sol)
    assert sol[-1] == EOS_ID and len(sol) <= CFG.sft_max_hops + 1
    assert decode(p.prompt_ids) == p.prompt_text
    assert is_correct(p, encode("".join(map(str, p.shortest_path()))) + [EOS_ID])


@settings(max_examples=30, deadline=None)
@given(seeds, st.integers(0, 100), st.integers(0, 9))
def test_a_walk_with_a_hop_off_the_graph_or_a_wrong_end_does_not_verify(seed, pos, node):
    rng = np.random.default_rng(seed)
    p = draw_problem(rng, CFG)
    walk = [int(c) for c in decode(solution_ids(p, rng, CFG))]
    i = pos % len(walk)
    prev = p.start if i == 0 else walk[i - 1]
    if node not in p.adj[prev] or node >= len(p.adj):  # replace hop i by a non-edge
        bad = walk[:i] + [node] + walk[i + 1 :]
        assert not is_correct(p, encode("".join(map(str, bad))) + [EOS_ID])
    if len(walk) > 1:  # stopping early: ends off the goal
        assert not is_correct(p, encode("".join(map(str, walk[:-1]))) + [EOS_ID])
    assert not is_correct(p, encode("".join(map(str, walk))))  # no EOS: truncated


def test_a_walk_must_stop_at_its_first_arrival_and_hold_only_digits():
    p = WalkProblem(((1,), (0, 2), (1,)), start=0, goal=2)  # 0 -> 1 -> {0, 2}, 2 -> 1
    assert p.prompt_text == "A1B0B2C1>2?0"
    assert is_correct(p, encode("12") + [EOS_ID])
    assert is_correct(p, encode("1012") + [EOS_ID])  # a detour through a cycle
    assert not is_correct(p, encode("1212") + [EOS_ID])  # passed the goal, went on
    assert not is_correct(p, encode("1>2") + [EOS_ID])
    assert not is_correct(p, [EOS_ID])


def test_problems_avoid_the_heldout_set_and_the_registry_names_both_tasks():
    held = frozenset(p.prompt_text for p in heldout_walk_problems(CFG, 64))
    train = sample_walk_problems(np.random.default_rng(1), CFG, 500, held)
    assert not {p.prompt_text for p in train} & held
    sizes = [len(p.adj) for p in train]
    assert min(sizes) == CFG.n_min and max(sizes) == CFG.n_max
    assert all(
        1 <= len(vs) <= CFG.degree_max and u not in vs for p in train for u, vs in enumerate(p.adj)
    )
    assert set(TASKS) == {"digit-chain", "graph-walk", "lookup", "arithmetic"}
    ops = task_ops("graph-walk", TaskConfig(), CFG)
    sols = ops.solutions(np.random.default_rng(0), train[:20])
    assert all(ops.correct(p, s) and ops.reward(p, s) == 1.0 for p, s in zip(train, sols))


def test_bad_settings_are_named():
    import pytest

    with pytest.raises(ValueError, match="n_max"):
        WalkConfig(n_max=11)
    with pytest.raises(ValueError, match="unknown task 'maze'"):
        task_ops("maze", TaskConfig(), CFG)
