"""Versions per token of the asynchronous pipelines' rollouts (trace schema version 3)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.engine.core import EngineConfig
from rolloutlab.sim.models.cost import LinearCost
from rolloutlab.sim.models.lengths import LognormalLengths
from rolloutlab.sim.pipelines.async_pipeline import run_pipeline
from rolloutlab.sim.pipelines.rollout_versions import VersionClock
from rolloutlab.sim.pipelines.spec import PipelineConfig
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.scenario import Scenario
from rolloutlab.sim.trace.metrics import consumed, pipeline_summary


def scenario(paged: bool) -> Scenario:
    return Scenario(
        name="spans",
        prompt_tokens=16,
        lengths=LognormalLengths(
            mu=3.5, sigma_prompt=0.8, sigma_within=0.5, max_response_length=300
        ),
        cost=LinearCost(a_s=0.01, b_s=1e-4, c_s=1e-6, learner_const_s=0.2, sync_s=0.05),
        engine=EngineConfig(n_workers=2, max_num_seqs=8, kv_blocks=400 if paged else None),
    )


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(["bounded", "partial"]),
    st.integers(0, 3),
    st.booleans(),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(1, 10),
    st.integers(0, 1000),
)
def test_versions_per_token_are_consistent(kind, S, paged, B, G, steps, seed):
    pc = PipelineConfig(kind, S=S)
    rollouts, steps_df, _ = run_pipeline(scenario(paged), StaticG(G), RunConfig(steps, B, seed), pc)
    used = consumed(rollouts)
    disp, first, last = (
        used[c].to_numpy()
        for c in ("version_dispatch", "version_first_token", "version_last_token")
    )
    stale = used["stale_tokens"].to_numpy()
    tokens = used["response_tokens"].to_numpy()
    assert (disp <= first).all() and (first <= last).all()
    assert (used["policy_version"].to_numpy() == last).all()
    assert ((0 <= stale) & (stale < tokens)).all()
    if kind == "bounded":  # finishes under the weights it started with
        assert (disp == last).all() and (stale == 0).all()
    else:  # a token made before a sync is made by an older version than the last one
        assert ((stale > 0) == (first < last)).all()
    s = pipeline_summary(rollouts, steps_df, S)
    if used.height:
        assert s["staleness_dispatch_mean"] >= s["staleness_first_token_mean"]
        assert s["staleness_first_token_mean"] >= s["staleness_mean"]
        ends = np.sort(steps_df["t_end"].to_numpy())  # v_gen = k+1 from step k's end on
        admitted = used["t_first_token"].to_numpy()
        if kind == "partial":
            assert (first == np.searchsorted(ends, admitted, side="left")).all()


def test_version_clock():
    c = VersionClock()
    c.change(10.0, 1)
    c.change(20.0, 3)
    assert c.at(np.array([0.0, 10.0, 10.5, 20.0, 25.0])).tolist() == [0, 0, 1, 1, 3]
