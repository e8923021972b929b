"""The one pipeline interface (sim.pipelines.registry): every kind has a runner, the
registry's runs are the runners' own, and a kind an engine cannot run is refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.pipelines.async_pipeline import run_pipeline
from rolloutlab.sim.pipelines.async_stream import run_stream
from rolloutlab.sim.pipelines.registry import RUNNERS, PipelineResult, runner_for, simulate
from rolloutlab.sim.pipelines.spec import KINDS, parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig, run_sync
from rolloutlab.sim.pipelines.sync_fast import run_sync_fast

from tests.test_async_pipeline import tiny


def test_every_kind_has_a_simpy_runner_and_fast_runs_sync_only():
    assert set(RUNNERS["simpy"]) == set(KINDS)
    assert set(RUNNERS["fast"]) == {"sync"}


@pytest.mark.parametrize("spec", ["one-step-off", "bounded:2", "async:2"])
def test_the_fast_engine_refuses_an_asynchronous_pipeline(spec):
    with pytest.raises(ValueError, match="needs --engine simpy"):
        runner_for(parse_pipeline(spec), "fast")


def test_an_unknown_engine_is_refused_by_name():
    with pytest.raises(ValueError, match="engine: must be one of"):
        runner_for(parse_pipeline("sync"), "vidur")


@settings(max_examples=6, deadline=None)
@given(G=st.sampled_from([2, 4]), seed=st.integers(0, 50))
def test_simulate_sync_is_run_sync_on_either_engine(G, seed):
    sc, cfg = tiny(), RunConfig(steps=3, prompts=4, seed=seed)
    want_r, want_s = run_sync(sc, StaticG(G), cfg)
    got = simulate(sc, StaticG(G), cfg)
    assert isinstance(got, PipelineResult) and got.ledger is None
    assert_frame_equal(got.rollouts, want_r)
    assert_frame_equal(got.steps, want_s)
    fast_r, fast_s = run_sync_fast(sc, StaticG(G), cfg)
    got_fast = simulate(sc, StaticG(G), cfg, engine="fast")
    assert_frame_equal(got_fast.rollouts, fast_r)
    assert_frame_equal(got_fast.steps, fast_s)


@pytest.mark.parametrize(
    ("spec", "runner"),
    [("one-step-off", run_pipeline), ("bounded:2", run_pipeline), ("async:2", run_stream)],
)
def test_simulate_async_is_its_runner_with_the_ledger(spec, runner):
    sc, cfg, pipe = tiny(), RunConfig(steps=3, prompts=4, seed=1), parse_pipeline(spec)
    want_r, want_s, want_ledger = runner(sc, StaticG(4), cfg, pipe)
    got = simulate(sc, StaticG(4), cfg, pipe)
    assert_frame_equal(got.rollouts, want_r)
    assert_frame_equal(got.steps, want_s)
    assert got.ledger is not None and type(got.ledger) is type(want_ledger)
