"""The iteration loop of analysis/idle/turn_schedule.py against the SimPy multi-turn engine."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.analysis.idle.turn_schedule import turn_features
from rolloutlab.analysis.idle.turns import StepTurns, run_turns
from rolloutlab.sim.engine.core import EngineConfig
from rolloutlab.sim.models.cost import LinearCost
from rolloutlab.sim.models.turns import MultiTurn, ToolLatency, TurnLaw


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    slots=st.integers(1, 12),
    prefix_caching=st.booleans(),
    out_tokens=st.integers(0, 5),
    cost=st.tuples(*[st.sampled_from([0.0, 1e-4, 3e-3]) for _ in range(4)]),
)
def test_finish_times_equal_the_simpy_engine(seed, slots, prefix_caching, out_tokens, cost):
    rng = np.random.default_rng(seed)
    n_prompts, G, K = int(rng.integers(1, 4)), int(rng.integers(1, 5)), 4
    n = n_prompts * G
    n_turns = rng.integers(1, K + 1, n)
    lengths = rng.integers(1, 7, (K, n))
    lat = rng.uniform(1e-4, 0.05, (n, K))  # 0 excluded: a call returning at a boundary
    prompts = rng.integers(3, 20, n_prompts)
    c = LinearCost(1e-3 + cost[0], cost[1], cost[2], cost[3])
    engine = EngineConfig(n_workers=1, max_num_seqs=slots, prefix_caching=prefix_caching)
    mt = MultiTurn(TurnLaw("fixed", 1.0, 1), ToolLatency(), tool_output_tokens=out_tokens)
    sturns = StepTurns(n_turns, lengths, lat, lat.sum(axis=1))
    _, _, t_sim = run_turns(sturns, prompts, G, c, engine, mt, cap=10)
    F, idle, t = turn_features(
        lengths, n_turns, lat, prompts, G, c, slots, out_tokens, prefix_caching, cap=10
    )
    np.testing.assert_allclose(t, t_sim, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(F @ c.coef() + idle, t, rtol=1e-12, atol=1e-12)
    assert (idle >= 0).all() and (F[:, 0] >= lengths[0]).all()


def test_one_rollout_by_hand_idles_on_its_tool():
    # 1 s per iteration: turn 0 (2 tokens) ends at 2, the tool returns at 2.5 (the worker
    # idles 0.5 s), turn 1 (3 tokens) ends at 5.5: 5 iterations, 0.5 s idle
    F, idle, t = turn_features(
        np.array([[2], [3]]), np.array([2]), np.array([[0.5, 0.0]]), np.array([4]), 1,
        LinearCost(1.0, 0.0, 0.0), 4, 1, True, cap=24,
    )  # fmt: skip
    assert t[0] == pytest.approx(5.5) and idle[0] == pytest.approx(0.5)
    assert F[0].tolist() == [5.0, 5.0, 4 + 5 + (7 + 8 + 9), 4 + 1]


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="max_num_seqs 0"):
        turn_features(
            np.ones((1, 2), int), np.ones(2, int), np.zeros((2, 1)), np.array([3]), 2,
            LinearCost(1.0, 0.0, 0.0), 0, 0, False, cap=5,
        )  # fmt: skip
