"""Multi-turn steps of ``compare idle`` (analysis/idle/turns.py)."""

import numpy as np
import polars as pl
import pytest
from rolloutlab.analysis.idle.turns import (
    StepTurns,
    TurnDraws,
    fit_turn_cost,
    run_turns,
    schedule_rmse,
    step_turns,
    turn_schedules,
    zero_latency_fit,
)
from rolloutlab.analysis.inputs.run_input import StepLayout
from rolloutlab.sim.engine.core import EngineConfig
from rolloutlab.sim.models.cost import LinearCost
from rolloutlab.sim.models.turns import MultiTurn, ToolLatency, TurnLaw

ENGINE = EngineConfig(n_workers=1, max_num_seqs=8, prefix_caching=False)
MT = MultiTurn(TurnLaw("geometric", 2.0, 3), ToolLatency(0.01, 0.02, 0.5))


def test_one_rollout_by_hand():
    # 1 s per iteration, nothing else: turn 0 (3 tokens) ends at 3, the tool returns at
    # 3.5, turn 1 (2 tokens) ends at 5.5.
    st = StepTurns(np.array([2]), np.array([[3], [2]]), np.array([[0.5, 0.0]]), np.array([0.5]))
    _, t1, tf = run_turns(st, np.array([4]), 1, LinearCost(1.0, 0.0, 0.0), ENGINE, MT, cap=24)
    assert tf[0] == pytest.approx(5.5)
    assert t1[0] == pytest.approx(1.0)


def test_step_turns_orders_rollouts_as_the_layout():
    turns = pl.DataFrame(
        {
            "step": [5, 5, 5, 5],
            "prompt_id": [7, 7, 7, 3],
            "sample_idx": [0, 0, 0, 0],
            "turn": [0, 1, 2, 0],
            "response_tokens": [2, 3, 4, 6],
            "t_tool_request": [1.0, 2.0, None, None],
            "t_tool_end": [1.25, 2.5, None, None],
        }
    )
    lay = StepLayout(5, np.array([[6], [9]]), np.array([10, 10]), np.zeros(2))
    order = pl.DataFrame({"prompt_id": [3, 7], "sample_idx": [0, 0]})
    st = step_turns(turns, lay, order)
    assert st.n_turns.tolist() == [1, 3]
    assert st.lengths[:, 1].tolist() == [2, 3, 4] and st.lengths[:, 0].tolist() == [6, 0, 0]
    assert st.latencies[1].tolist() == [0.25, 0.5, 0.0]
    assert st.tool_s.tolist() == [0.0, 0.75]


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_cost_fit_recovers_the_cost_of_a_simulated_run(prefix_caching):
    # the run's tools take 1-30 ms, a few iterations: the schedule depends on the cost
    engine = EngineConfig(n_workers=1, max_num_seqs=8, prefix_caching=prefix_caching)
    mt = MultiTurn(TurnLaw("geometric", 2.0, 3), ToolLatency(0.01, 0.02, 0.5), tool_output_tokens=3)
    true = LinearCost(a_s=0.004, b_s=0.0002, c_s=0.00001, prefill_s_per_token=0.00005)
    rng = np.random.default_rng(1)
    layouts, turns = [], []
    for step in range(6):
        n = rng.integers(1, 4, 16)
        L = rng.integers(2, 9, (3, 16)) * (np.arange(3)[:, None] < n)
        lat = rng.uniform(0.001, 0.03, (16, 3))
        st = StepTurns(n, L, lat, lat.sum(axis=1))
        P = rng.integers(10, 30, 4)
        _, _, tf = run_turns(st, P, 4, true, engine, mt, cap=24)
        layouts.append(StepLayout(step, L.sum(axis=0).reshape(4, 4), P, tf + 0.03))
        turns.append(st)
    fit = fit_turn_cost(layouts, turns, engine, mt, cap=24)
    # the alternation stops at a schedule consistent with its own fit, which need not be
    # the true one (a call returning just before or after a boundary): close, not exact
    assert fit.rel_rmse < 0.005
    assert fit.submit_delay_s == pytest.approx(0.03, rel=0.01)
    np.testing.assert_allclose(fit.cost.coef(), true.coef(), rtol=0.1, atol=1e-9)
    # the zero-latency features (the old fit) miss by far more on this run
    assert (
        schedule_rmse(
            layouts,
            zero_latency_fit(layouts, turns, engine, mt, 24),
            turn_schedules(
                layouts,
                turns,
                engine,
                mt,
                24,
                zero_latency_fit(layouts, turns, engine, mt, 24).cost,
            ),
        )
        > 10 * fit.rel_rmse
    )


def test_drawn_turns_come_from_the_pools():
    st = StepTurns(
        np.array([2, 3]), np.array([[1, 2], [9, 3], [0, 9]]), np.zeros((2, 3)), np.zeros(2)
    )
    mt = MultiTurn(TurnLaw("empirical", 2.5, 3, 2, (2, 3), (0.5, 0.5)), MT.tool_latency)
    pool = TurnDraws.fit([st], mt)
    assert sorted(pool.mid_lengths.tolist()) == [1, 2, 3] and pool.last_lengths.tolist() == [9, 9]
    d = pool.draw(np.random.default_rng(0), 50)
    assert set(d.n_turns.tolist()) == {2, 3}
    assert (d.lengths[d.n_turns - 1, np.arange(50)] == 9).all()
    assert (d.latencies >= 0.01).all()
