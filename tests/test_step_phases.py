"""The reward and periodic phases of a step (sim.models.step_phases) and the pipelines
that price them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.models.step_phases import (
    PeriodicPhase,
    RewardLatency,
    RewardPhase,
    StepPhases,
    extra_step_s,
    periodic_s,
    reward_finish_s,
    reward_wait_s,
)
from rolloutlab.sim.pipelines.registry import simulate
from rolloutlab.sim.pipelines.spec import parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.scenario import CalibrationError, load_scenario, scenario_from_dict


def plain_queue(arrival, latency, workers):
    """Reference: serve in arrival order, each on the worker that frees first (a scan)."""
    free = [0.0] * workers
    end = 0.0
    for i in sorted(range(len(arrival)), key=lambda i: (arrival[i], i)):
        w = min(range(workers), key=lambda j: free[j])
        free[w] = max(free[w], arrival[i]) + latency[i]
        end = max(end, free[w])
    return end


def test_four_requests_on_two_workers_by_hand():
    # 1 s and 2 s start at 0; 3 s starts at 1 (ends 4); 4 s starts at 2 (ends 6)
    assert reward_finish_s(np.zeros(4), np.array([1.0, 2.0, 3.0, 4.0]), 2) == 6.0


def test_a_late_arrival_waits_for_itself_not_for_the_queue():
    assert reward_finish_s(np.array([0.0, 10.0]), np.array([1.0, 1.0]), 1) == 11.0


def test_no_requests_finish_at_zero():
    assert reward_finish_s(np.zeros(0), np.zeros(0), 4) == 0.0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 64), st.integers(0, 64)), min_size=1, max_size=40),
    st.integers(1, 8),
)
def test_queue_equals_the_plain_scan(pairs, workers):
    # dyadic times: every sum is exact, so the two must agree to the bit
    arr = np.array([a / 8 for a, _ in pairs])
    lat = np.array([s / 8 for _, s in pairs])
    got = reward_finish_s(arr, lat, workers)
    assert got == plain_queue(arr.tolist(), lat.tolist(), workers)
    assert got >= float(np.max(arr + lat))
    assert got >= lat.sum() / workers - 1e-12


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 64), min_size=2, max_size=40), st.integers(1, 7))
def test_more_workers_never_finish_later(lat, workers):
    lat = np.array(lat, dtype=float)
    z = np.zeros(len(lat))
    assert reward_finish_s(z, lat, workers + 1) <= reward_finish_s(z, lat, workers)


def const_phase(overlap, share=0.0, adv=0.0):
    return RewardPhase(RewardLatency("constant", 2.0), 2, overlap, share, adv)


def test_reward_wait_by_overlap_by_hand():
    rng = np.random.default_rng(0)
    fin = np.array([0.0, 0.0, 0.0, 3.0])  # finish times from the step start
    # after: 4 requests of 2 s on 2 workers from the end of generation: 4 s, + adv 0.5
    assert reward_wait_s(const_phase("after", adv=0.5), fin, 3.0, 6.0, rng) == 4.5
    # learner: half of a 6 s learner hides 3 of those 4 s
    assert reward_wait_s(const_phase("learner", 0.5), fin, 3.0, 6.0, rng) == 1.0
    # learner longer than the rewards: no wait
    assert reward_wait_s(const_phase("learner", 1.0), fin, 3.0, 6.0, rng) == 0.0
    # generation: three at 0 (two run 0-2, one 2-4), the last at 3 runs 3-5; gen ends at 3
    assert reward_wait_s(const_phase("generation"), fin, 3.0, 6.0, rng) == 2.0


def test_periodic_phases_run_at_their_period():
    ph = StepPhases(None, (PeriodicPhase("testing", 5, 100.0), PeriodicPhase("save", 10, 7.0)))
    # 0-based step 4 is verl's global step 5
    assert [periodic_s(ph, t) for t in (0, 3, 4, 9, 14)] == [0.0, 0.0, 100.0, 107.0, 100.0]
    assert extra_step_s(ph, 4, 0, np.zeros(3), 1.0, 1.0) == (0.0, 100.0)


def test_block_round_trips_and_bad_values_are_refused():
    ph = StepPhases(
        RewardPhase(RewardLatency("uniform", 1.0, 40.0), 256, "learner", 0.3, 0.5),
        (PeriodicPhase("testing", 5, 145.0),),
    )
    assert StepPhases.from_dict(ph.to_dict()) == ph
    with pytest.raises(ValueError, match="overlap"):
        RewardPhase(RewardLatency(), 1, "sometimes")
    with pytest.raises(ValueError, match="a <= b"):
        RewardLatency("uniform", 3.0, 1.0)
    with pytest.raises(ValueError, match="workers"):
        StepPhases.from_dict({"reward": {"latency": {"kind": "constant", "a": 1}, "workers": 0}})


def test_latency_laws_scale_and_mean():
    assert RewardLatency("uniform", 1.0, 3.0).scaled(2.0) == RewardLatency("uniform", 2.0, 6.0)
    assert RewardLatency("uniform", 1.0, 3.0).mean_s() == 2.0
    ln = RewardLatency("lognormal", 4.0, 0.5)
    assert ln.scaled(2.0) == RewardLatency("lognormal", 8.0, 0.5)
    draws = ln.sample(np.random.default_rng(1), 200_000)
    assert abs(draws.mean() / ln.mean_s() - 1) < 0.01


def test_a_bad_step_phases_block_names_the_field():
    d = dict(load_scenario("gsm8k").source)
    d["step_phases"] = {"reward": {"latency": {"kind": "gamma"}}}
    with pytest.raises(CalibrationError, match="step_phases"):
        scenario_from_dict(d, "cal.json")


PHASES = StepPhases(
    RewardPhase(RewardLatency("uniform", 1.0, 40.0), 16, "learner", 0.3, 0.5),
    (PeriodicPhase("testing", 3, 50.0),),
)


@pytest.mark.parametrize("overlap", ["after", "learner", "generation"])
def test_simpy_and_fast_pipelines_price_the_phases_alike(overlap):
    phases = replace(PHASES, reward=replace(PHASES.reward, overlap=overlap))
    sc = replace(load_scenario("gsm8k"), step_phases=phases)
    cfg = RunConfig(steps=7, prompts=8)
    a = simulate(sc, StaticG(4), cfg, engine="simpy").steps
    b = simulate(sc, StaticG(4), cfg, engine="fast").steps
    cols = ["t_start", "t_end", "gen_time", "train_time", "reward_wait_s", "periodic_s"]
    np.testing.assert_allclose(a.select(cols).to_numpy(), b.select(cols).to_numpy(), rtol=1e-12)
    # a step is its parts
    parts = a["gen_time"] + a["train_time"] + a["reward_wait_s"] + a["periodic_s"] + a["sync_time"]
    np.testing.assert_allclose((a["t_end"] - a["t_start"]).to_numpy(), parts.to_numpy())
    assert a["periodic_s"].to_list() == [0, 0, 50, 0, 0, 50, 0]
    assert (a["reward_wait_s"] >= 0.5).all()


def test_without_phases_the_columns_are_null_and_steps_unchanged():
    sc = load_scenario("gsm8k")
    cfg = RunConfig(steps=3, prompts=8)
    plain = simulate(sc, StaticG(4), cfg, engine="fast").steps
    assert plain["reward_wait_s"].null_count() == 3
    zero = StepPhases(RewardPhase(RewardLatency("constant", 0.0), 4, "after"), ())
    priced = simulate(replace(sc, step_phases=zero), StaticG(4), cfg, engine="fast").steps
    assert priced["t_end"].to_list() == plain["t_end"].to_list()


def test_a_controller_sees_the_longer_step():
    sc = replace(load_scenario("gsm8k"), step_phases=PHASES)
    base = simulate(load_scenario("gsm8k"), StaticG(4), RunConfig(steps=3, prompts=8)).steps
    slow = simulate(sc, StaticG(4), RunConfig(steps=3, prompts=8)).steps
    assert (slow["t_end"] > base["t_end"]).all()


def test_asynchronous_pipelines_refuse_step_phases():
    sc = replace(load_scenario("gsm8k"), step_phases=PHASES)
    with pytest.raises(ValueError, match="synchronous pipeline only"):
        simulate(sc, StaticG(4), RunConfig(steps=2, prompts=8), parse_pipeline("async:1"))
