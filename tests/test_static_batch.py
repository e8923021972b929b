"""Static batching (sim.engine.static_batch) against hand-counted iterations, against the
continuous engine where the two must agree (one wave, nothing left waiting), and
``compare idle`` on statically batched runs (a TRL trace is one)."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.analysis.idle.compare import IdleCompareConfig, compare_idle
from rolloutlab.analysis.idle.run_cost import run_cost
from rolloutlab.analysis.inputs.run_input import RunInputError, load_run
from rolloutlab.sim.engine.core import EngineConfig, generate
from rolloutlab.sim.engine.static_batch import static_generate
from rolloutlab.sim.models.cost import LinearCost

from tests.compare_helpers import COST as RUN_COST
from tests.compare_helpers import write_run

# decimal digits keep each feature readable in the sums below
COST = LinearCost(a_s=1, b_s=10, c_s=100, prefill_s_per_token=1000)
LENGTHS = np.array([[1, 3], [2, 2]])  # flat rows: L = 1, 3, 2, 2
PROMPTS = np.array([2, 4])  # flat rows: p = 2, 2, 4, 4


def test_padded_one_wave_by_hand():
    # 4 rows, prompts left-padded to P = 4, every row decodes for 3 iterations:
    # k=1: 1 + 10*4 + 100*4*4 + 1000*16 = 17641; k=2: 1 + 40 + 100*4*5 = 2041; k=3: 2441
    out = static_generate(LENGTHS, PROMPTS, COST, max_num_seqs=4, padded=True)
    np.testing.assert_allclose(out.t_first_token, [17641] * 4)
    np.testing.assert_allclose(out.t_finish, [17641, 22123, 19682, 19682])
    np.testing.assert_allclose(out.wave_end, [22123])


def test_unpadded_one_wave_by_hand():
    # finished rows leave: k=1 runs 4 rows over 2+2+4+4 = 12 context, prefills 12:
    # 1 + 40 + 1200 + 12000 = 13241; k=2 runs L>=2 (3 rows), context 3+5+5 = 13: 1331;
    # k=3 runs the L=3 row, context 4: 1 + 10 + 400 = 411
    out = static_generate(LENGTHS, PROMPTS, COST, max_num_seqs=4, padded=False)
    np.testing.assert_allclose(out.t_finish, [13241, 14983, 14572, 14572])


def test_waves_wait_for_the_previous_waves_longest_row():
    # wave 0 = rows (L 1, 3; p 2, 2): 4421, 621, 821 -> ends 5863;
    # wave 1 = rows (L 2, 2; p 4, 4): 8821, 1021 -> 14684, 15705
    out = static_generate(LENGTHS, PROMPTS, COST, max_num_seqs=2, padded=True)
    np.testing.assert_array_equal(out.wave, [0, 0, 1, 1])
    np.testing.assert_allclose(out.t_first_token, [4421, 4421, 14684, 14684])
    np.testing.assert_allclose(out.t_finish, [4421, 5863, 15705, 15705])
    np.testing.assert_allclose(out.wave_end, [5863, 15705])


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda n: st.tuples(
            st.lists(st.lists(st.integers(1, 12), min_size=3, max_size=3), min_size=n, max_size=n),
            st.lists(st.integers(1, 9), min_size=n, max_size=n),
        )
    )
)
def test_one_unpadded_wave_is_the_continuous_engine_with_nothing_waiting(case):
    lengths, prompts = np.array(case[0]), np.array(case[1])
    engine = EngineConfig(n_workers=1, max_num_seqs=lengths.size, prefix_caching=False)
    cont = generate(lengths, prompts, COST, engine)
    stat = static_generate(lengths, prompts, COST, lengths.size, padded=False)
    np.testing.assert_allclose(stat.t_finish, cont.t_finish)
    np.testing.assert_allclose(stat.t_first_token, cont.t_first_token)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=2, max_size=12), st.integers(1, 5))
def test_a_wave_ends_with_its_longest_row_and_padding_never_saves_time(lengths, cap):
    L = np.array(lengths).reshape(-1, 1)
    p = np.arange(1, L.shape[0] + 1)
    padded = static_generate(L, p, COST, cap, padded=True)
    plain = static_generate(L, p, COST, cap, padded=False)
    for w, end in enumerate(padded.wave_end):
        assert padded.t_finish[padded.wave == w].max() == pytest.approx(end)
    assert (padded.t_finish >= plain.t_finish - 1e-9).all()


def test_refuses_an_empty_response_and_no_slot():
    with pytest.raises(ValueError, match="length must be >= 1"):
        static_generate(np.array([[0, 2]]), np.array([3]), COST, 2)
    with pytest.raises(ValueError, match="max_num_seqs must be >= 1, got 0"):
        static_generate(np.array([[1, 2]]), np.array([3]), COST, 0)


@pytest.mark.parametrize("batching", ["padded", "static"])
def test_compare_idle_replays_a_statically_batched_run_exactly(tmp_path, batching):
    run = load_run(write_run(tmp_path, [4, 16, 8] * 4, batching=batching))
    assert run.batching == batching
    res = compare_idle(run, IdleCompareConfig(fit_steps=6, draws=4))
    s = {(r["prediction"], r["scope"]): r for r in res.summary.to_dicts()}
    assert s[("replay", "all")]["makespan_mdape"] < 1e-6
    assert res.cost_fit.cost.c_s == pytest.approx(RUN_COST.c_s, rel=1e-3)


def test_the_continuous_model_misses_a_padded_run_that_the_static_one_replays(tmp_path):
    run_dir = write_run(tmp_path, [4, 16, 8] * 4, batching="padded")
    cfg_path = run_dir / "config.json"
    doc = json.loads(cfg_path.read_text())
    doc["config"]["engine_mode"] = "continuous"  # the same times, read as continuous batching
    cfg_path.write_text(json.dumps(doc))
    res = compare_idle(load_run(run_dir), IdleCompareConfig(fit_steps=6, draws=4))
    row = res.summary.filter((pl.col("prediction") == "replay") & (pl.col("scope") == "all"))
    assert row["makespan_mdape"][0] > 0.01


def test_a_trl_trace_is_padded_and_a_calibration_refuses_a_static_run(tmp_path):
    run_dir = write_run(tmp_path, [4] * 4, batching="padded")
    cfg_path = run_dir / "config.json"
    doc = json.loads(cfg_path.read_text())
    del doc["config"]["batch_padding"]  # a trace from before the key: framework decides
    doc["config"]["framework"] = "trl"
    cfg_path.write_text(json.dumps(doc))
    run = load_run(run_dir)
    assert run.batching == "padded"
    with pytest.raises(RunInputError, match="batched 'padded'; a calibration's engine"):
        run_cost(run)
    doc["config"]["engine_mode"] = "chunked"
    cfg_path.write_text(json.dumps(doc))
    with pytest.raises(RunInputError, match="engine_mode 'chunked'; expected 'continuous' or"):
        load_run(run_dir)
