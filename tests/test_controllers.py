"""SAGC and StaticG: their properties and state round trips."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.control.controllers import SAGC, StaticG, split_specs
from rolloutlab.sim.control.observation import observe_step
from rolloutlab.sim.control.spec import parse_controller


def straggling_lengths(G: int, n_prompts: int, straggle: bool) -> list[list[int]]:
    """Lengths whose max/median is 10 (straggle) or 1 (not)."""
    lengths = [[100] * G for _ in range(n_prompts)]
    if straggle:
        lengths[0][0] = 1000
    return lengths


def drive(ctl: SAGC, p_of_G: dict[int, float], steps: int, seed: int) -> list[int]:
    """Run ``ctl`` against a stationary straggler probability per G; return the S_t's."""
    rng = np.random.default_rng(seed)
    events = []
    for _ in range(steps):
        G = ctl.propose()
        s = bool(rng.random() < p_of_G[G])
        ctl.observe(straggling_lengths(G, 3, s))
        events.append(int(s))
    return events


probs = st.floats(min_value=0.0, max_value=1.0)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), p4=probs, p8=probs, p16=probs, steps=st.integers(1, 120))
def test_sagc_invariants(seed, p4, p8, p16, steps):
    ctl = SAGC(candidates=(4, 8, 16), seed=seed, tau=4.0)
    rng = np.random.default_rng(seed)
    prev = ctl.current
    for _ in range(steps):
        G = ctl.propose()
        assert G in ctl.candidates
        assert abs(ctl.candidates.index(G) - ctl.candidates.index(prev)) <= ctl.radius
        prev = G
        p = {4: p4, 8: p8, 16: p16}[G]
        ctl.observe(straggling_lengths(G, 2, bool(rng.random() < p)))
        assert ctl.lam >= 0.0
        assert all(a > 0 for a in ctl.alpha.values()) and all(b > 0 for b in ctl.beta.values())


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), forget=st.sampled_from(["chosen", "to_prior"]))
def test_sagc_same_seed_same_sequence(seed, forget):
    p = {4: 0.1, 8: 0.4, 16: 0.9}
    runs = []
    for _ in range(2):
        ctl = SAGC(seed=seed, forget=forget)
        events = drive(ctl, p, 80, seed)
        runs.append(([h[0] for h in ctl.history], events))
    assert runs[0] == runs[1]


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**16), delta=st.sampled_from([0.2, 0.3, 0.5]))
def test_sagc_long_run_straggler_rate_near_delta(seed, delta):
    # Feasible constraint: the smallest G straggles less often than delta, the largest more.
    p = {4: 0.05, 8: (0.05 + 0.9) / 2, 16: 0.9}
    ctl = SAGC(seed=seed, delta=delta)
    events = drive(ctl, p, 4000, seed)
    rate = float(np.mean(events[1000:]))
    assert abs(rate - delta) < 0.08, rate


def test_sagc_learns_that_large_G_straggles_more():
    ctl = SAGC(seed=1)
    drive(ctl, {4: 0.05, 8: 0.3, 16: 0.95}, 600, 1)
    visits = {g: sum(1 for h in ctl.history if h[0] == g) for g in ctl.candidates}
    assert visits[16] > 0 and visits[4] > 0
    post = ctl.posterior_mean()
    assert post[16] > post[4]


def test_sagc_prefers_largest_G_when_nothing_straggles():
    ctl = SAGC(seed=3, init_G=4)
    drive(ctl, {4: 0.0, 8: 0.0, 16: 0.0}, 50, 3)
    assert [h[0] for h in ctl.history][-10:] == [16] * 10
    assert ctl.lam == 0.0


def test_sagc_dual_update_is_projected_ascent():
    ctl = SAGC(seed=0, delta=0.25, eta_lambda=0.5)
    lam = 0.0
    for s in (1, 0, 0, 0, 1, 1):
        ctl.propose()
        ctl.observe(straggling_lengths(ctl.current, 2, bool(s)))
        lam = max(0.0, lam + 0.5 * (s - 0.25))
        assert ctl.lam == pytest.approx(lam)
    assert ctl.lam == pytest.approx(0.75)  # 0.375, 0.25, 0.125, 0, 0.375, 0.75


def test_sagc_beta_update_with_forgetting():
    ctl = SAGC(seed=0, gamma=0.5, prior=(1.0, 1.0))
    G = ctl.propose()
    ctl.observe(straggling_lengths(G, 2, True))
    assert ctl.alpha[G] == pytest.approx(0.5 * 1 + 1)
    assert ctl.beta[G] == pytest.approx(0.5 * 1 + 0)
    others = [g for g in ctl.candidates if g != G]
    assert all(ctl.alpha[g] == 1.0 for g in others)


def test_sagc_credits_the_group_size_that_produced_the_lengths():
    ctl = SAGC(seed=0, init_G=16, gamma=1.0)
    ctl.propose()
    ctl.current = 8  # a later proposal, as in a pipeline that runs ahead
    ctl.observe(straggling_lengths(16, 2, True))  # the G=16 batch is consumed now
    assert ctl.alpha[16] == 2.0 and ctl.alpha[8] == 1.0
    ctl.observe([[5, 5, 5], [5, 5]])  # ragged (trimmed) groups: the last proposed G
    assert ctl.beta[8] == 2.0


def test_sagc_state_round_trip_continues_identically():
    p = {4: 0.1, 8: 0.5, 16: 0.9}
    a = SAGC(seed=7)
    drive(a, p, 40, 7)
    state = json.loads(json.dumps(a.state_dict()))  # must survive JSON
    b = SAGC(seed=999)
    b.load_state_dict(state)
    assert [a.propose() for _ in range(20)] == [b.propose() for _ in range(20)]


def test_static_g():
    ctl = StaticG(8)
    assert ctl.propose() == 8
    ctl.observe([[1, 2]])
    assert ctl.state_dict()["steps_observed"] == 1
    with pytest.raises(ValueError):
        StaticG(0)
    with pytest.raises(ValueError):
        ctl.observe([])


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 64), st.integers(0, 50), st.integers(1, 40), st.integers(1, 5))
def test_static_g_block_observe_equals_step_by_step(G, already, T, B):
    lengths = np.ones((T, B, G), dtype=np.int64)
    step_by_step, block = StaticG(G), StaticG(G)
    for c in (step_by_step, block):
        c.load_state_dict({"kind": "static", "G": G, "steps_observed": already})
    expected = []
    for t in range(T):
        step_by_step.observe(lengths[t])
        expected.append(json.dumps(step_by_step.state_dict()))
    assert block.observe_steps(lengths) == expected
    assert block.state_dict() == step_by_step.state_dict()
    with pytest.raises(ValueError, match="observe_steps"):
        block.observe_steps(lengths[0])


@pytest.mark.parametrize(
    "spec,err",
    [("static:x", "static:G"), ("foo", "expected"), ("sagc:bogus=1", "unknown SAGC option")],
)
def test_parse_controller_errors(spec, err):
    with pytest.raises(ValueError, match=err):
        parse_controller(spec)


def test_split_specs_keeps_sagc_options_together():
    assert split_specs("static:4, sagc:tau=15,delta=0.2,static:16") == [
        "static:4",
        "sagc:tau=15,delta=0.2",
        "static:16",
    ]
    assert split_specs("sagc,sagc:tau=3") == ["sagc", "sagc:tau=3"]


@pytest.mark.parametrize("spec", ["sagc:tau=abc", "sagc:tau=0.5", "sagc:delta=2"])
def test_bad_sagc_values_name_the_spec(spec):
    with pytest.raises(ValueError, match=f"controller spec '{spec}'"):
        parse_controller(spec)


def test_parse_controller_options():
    ctl = parse_controller("sagc:tau=3,delta=0.2,candidates=2/4/8", seed=1, tau=9.0)
    assert (ctl.tau, ctl.delta, ctl.candidates) == (3.0, 0.2, (2, 4, 8))
    assert parse_controller("sagc", tau=9.0).tau == 9.0
    assert parse_controller("static:4").name == "static:4"


# -- resume; floor and step-time budget ------------------------------------------------


def _step(ctl, rng: np.random.Generator, budgeted: bool) -> None:
    """One observed step of random lengths (and times when the controller wants them)."""
    G = ctl.current
    lengths = rng.integers(1, 400, size=(2, G)).tolist()
    times = {"gen_time_s": float(rng.uniform(1, 20)), "step_time_s": float(rng.uniform(5, 30))}
    ctl.observe(lengths, **(times if budgeted else {}))


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    k=st.integers(0, 30),
    m=st.integers(1, 30),
    forget=st.sampled_from(["chosen", "to_prior"]),
    budget=st.sampled_from([None, 15.0]),
)
def test_sagc_resume_continues_exactly_as_an_uninterrupted_run(seed, k, m, forget, budget):
    opts = {"forget": forget, "step_time_budget_s": budget, "tau": 3.0}
    whole, first = SAGC(seed=seed, **opts), SAGC(seed=seed, **opts)
    rng_whole, rng_first = np.random.default_rng(seed), np.random.default_rng(seed)
    for _ in range(k):
        for ctl, rng in ((whole, rng_whole), (first, rng_first)):
            ctl.propose()
            _step(ctl, rng, budget is not None)
    resumed = SAGC(seed=seed + 1, **opts)  # another seed: everything must come from the state
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    rng_resumed = rng_first
    for _ in range(m):
        assert resumed.propose() == whole.propose()
        state = rng_whole.bit_generator.state
        _step(whole, rng_whole, budget is not None)
        rng_resumed.bit_generator.state = state
        _step(resumed, rng_resumed, budget is not None)
        assert resumed.state_dict() == whole.state_dict()
    assert resumed.state_dict()["steps_observed"] == k + m


def test_default_sagc_declares_no_extras_and_keeps_its_state_keys():
    ctl = SAGC()
    assert ctl.observes == ()
    keys = {"kind", "candidates", "alpha", "beta", "lambda", "current", "steps_observed", "rng"}
    assert set(ctl.state_dict()) == keys
    assert parse_controller("sagc:step_time_budget_s=300").observes == ("gen_time_s", "step_time_s")


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    G_min=st.sampled_from([1, 3, 4, 5, 8, 16]),
    p=st.floats(0.0, 1.0),
)
def test_sagc_never_proposes_below_its_floor(seed, G_min, p):
    ctl = SAGC(seed=seed, G_min=G_min, init_G=16)
    assert min(ctl.candidates) >= G_min
    rng = np.random.default_rng(seed)
    for _ in range(60):
        G = ctl.propose()
        assert G >= G_min and G in (4, 8, 16)
        ctl.observe(straggling_lengths(G, 2, bool(rng.random() < p)))


def test_sagc_floor_above_every_candidate_is_refused():
    with pytest.raises(ValueError, match="G_min"):
        parse_controller("sagc:G_min=32")
    ctl = parse_controller("sagc:G_min=8,step_time_budget_s=300")
    assert (ctl.candidates, ctl.G_min, ctl.step_time_budget_s) == ((8, 16), 8, 300.0)
    with pytest.raises(ValueError, match="step_time_budget_s"):
        parse_controller("sagc:step_time_budget_s=0")


def _growing_run(ctl: SAGC, steps: int) -> list[int]:
    """Lengths that grow x1.02 per step up to x4 (t ~ 70) with max/median fixed at 2
    (< tau), and a step time of 10 ms per token of the longest rollout times ``G / 4``
    (more rollouts, a longer step): the straggler ratio never moves, the step time goes
    from 2 s to 8 s at G = 4, 16 s at G = 8, 32 s at G = 16."""
    Gs = []
    for t in range(steps):
        G = ctl.propose()
        Gs.append(G)
        scale = min(1.02**t, 4.0)
        lengths = [[round(100 * scale)] * G for _ in range(4)]
        lengths[0][0] = round(200 * scale)
        step_s = 0.01 * 200 * scale * G / 4
        observe_step(ctl, lengths, gen_time_s=0.8 * step_s, step_time_s=step_s)
    return Gs


def test_sagc_with_a_budget_reacts_to_step_time_growth_that_max_over_median_misses():
    plain = _growing_run(SAGC(seed=0, init_G=4), 400)
    budgeted = _growing_run(SAGC(seed=0, init_G=4, step_time_budget_s=10.0), 400)
    assert plain[-300:] == [16] * 300  # S_t = 0 throughout: G climbs and stays at the largest
    assert budgeted[:3] == plain[:3]  # same run while under budget
    # only G = 4 keeps the 10 s budget once lengths have grown: the long-run straggler
    # rate is held near delta = 0.3, so G = 4 at least ~70 % of the time
    late = budgeted[-200:]
    assert late.count(4) >= 0.6 * len(late), late


# -- the built-ins through the kit a user's controller is checked with -----------------


@pytest.mark.parametrize(
    "spec", ["static:4", "sagc", "sagc:forget=to_prior,radius=2,candidates=2/4/8/16"]
)
def test_builtins_keep_the_controller_contract(spec):
    from rolloutlab.testing import check_controller

    report = check_controller(spec, max_examples=10, straggler_steps=1500)
    assert report.ok  # check_controller raised with the report otherwise
