"""The vectorised fast path against the SimPy engine, step and pipeline level."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.control.controllers import SAGC, StaticG
from rolloutlab.sim.engine.core import EngineConfig, generate
from rolloutlab.sim.engine.fastpath import block_times, step_times
from rolloutlab.sim.models.cost import LinearCost
from rolloutlab.sim.models.dynamics import GroupLengths
from rolloutlab.sim.pipelines.sync import RunConfig, run_sync
from rolloutlab.sim.pipelines.sync_fast import run_sync_fast
from rolloutlab.sim.trace.schema import ROLLOUT_SCHEMA


@st.composite
def case(draw):
    B, G = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    lengths = np.array(draw(st.lists(st.integers(1, 300), min_size=B * G, max_size=B * G))).reshape(
        B, G
    )
    prompts = np.array(draw(st.lists(st.integers(0, 200), min_size=B, max_size=B)))
    f = st.floats(0, 1e-2, allow_nan=False)
    cost = LinearCost(a_s=draw(f), b_s=draw(f), c_s=draw(f) / 100, prefill_s_per_token=draw(f) / 10)
    cfg = EngineConfig(
        n_workers=draw(st.integers(1, 4)),
        max_num_seqs=draw(st.integers(1, 12)),
        dispatch=draw(st.sampled_from(["round_robin", "group", "least_loaded"])),
        prefix_caching=draw(st.booleans()),
    )
    return lengths, prompts, cost, cfg


@settings(max_examples=200, deadline=None)
@given(case(), st.integers(0, 3))
def test_fast_step_equals_simpy_engine(c, rr):
    lengths, prompts, cost, cfg = c
    batch = generate(lengths, prompts, cost, cfg)
    worker, t_first, t_fin, _ = step_times(lengths, prompts, cost, cfg)
    assert np.array_equal(worker, batch.worker)
    np.testing.assert_allclose(t_fin, batch.t_finish, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(t_first, batch.t_first_token, rtol=1e-9, atol=1e-12)
    # many steps in one call == step by step, whatever the dispatcher position
    stack = np.stack([lengths, lengths[::-1]])
    w2, _, f2, rr2 = block_times(stack, prompts, cost, cfg, rr)
    r = rr
    for s in range(2):
        ws, _, fs, r = step_times(stack[s], prompts, cost, cfg, r)
        assert np.array_equal(w2[s], ws)
        np.testing.assert_allclose(f2[s], fs, rtol=1e-9, atol=1e-12)
    assert r == rr2


@pytest.mark.parametrize("controller", [lambda: StaticG(4), lambda: SAGC(seed=1, tau=3.0)])
@pytest.mark.parametrize("dataset_size", [None, 8])
@pytest.mark.parametrize("gen_overhead_s", [0.0, 2.5])
def test_fast_pipeline_equals_simpy_pipeline(
    tiny_scenario, controller, dataset_size, gen_overhead_s
):
    sc = dataclasses.replace(
        tiny_scenario,
        lengths=GroupLengths(max_response_length=200, mu=3.0, sigma=0.7),
        engine=EngineConfig(n_workers=2, max_num_seqs=6, dispatch="round_robin"),
        cost=dataclasses.replace(tiny_scenario.cost, gen_overhead_s=gen_overhead_s),
    )
    cfg = RunConfig(steps=12, prompts=4, seed=3, dataset_size=dataset_size)
    r1, s1 = run_sync(sc, controller(), cfg)
    r2, s2 = run_sync_fast(sc, controller(), cfg, chunk_steps=5)
    key = ["step", "prompt_id", "sample_idx"]
    assert dict(r2.schema) == ROLLOUT_SCHEMA  # built without a cast: types must come out right
    r1, r2 = r1.sort(key), r2.sort(key)
    for col in r1.columns:
        if r1[col].dtype == pl.Float64:
            np.testing.assert_allclose(r2[col].to_numpy(), r1[col].to_numpy(), rtol=1e-9)
        else:
            assert r1[col].to_list() == r2[col].to_list(), col
    for col in ("t_start", "t_end", "gen_time"):
        np.testing.assert_allclose(s2[col].to_numpy(), s1[col].to_numpy(), rtol=1e-9)
    assert s1["controller_state"].to_list() == s2["controller_state"].to_list()


def test_fast_path_streams_rollouts_to_parquet(tiny_scenario, tmp_path):
    path = tmp_path / "r.parquet"
    none, steps = run_sync_fast(
        tiny_scenario, StaticG(2), RunConfig(steps=6, prompts=3), rollout_path=path
    )
    assert none is None and steps.height == 6
    assert pl.read_parquet(path).height == 6 * 3 * 2


def test_fast_path_refuses_kv_pressure(tiny_scenario):
    sc = dataclasses.replace(tiny_scenario, engine=EngineConfig(kv_blocks=100))
    with pytest.raises(ValueError, match="SimPy engine"):
        run_sync_fast(sc, StaticG(2), RunConfig(steps=1, prompts=1))
