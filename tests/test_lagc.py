"""LAGC and its model: formulas against independent closed forms,
controller invariants, state round trips, and the choices it must make."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from rolloutlab.sim.control.controllers import SAGC, split_specs
from rolloutlab.sim.control.lagc import LAGC
from rolloutlab.sim.control.lagc_model import LengthPool, expected_signal, population_beta
from rolloutlab.sim.control.observation import observe_step, propose_step
from rolloutlab.sim.control.spec import parse_controller
from scipy import integrate, stats

# -- the model ----------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(a=st.floats(0.2, 20), b=st.floats(0.2, 20), G=st.integers(1, 24))
def test_expected_signal_matches_numerical_integration_over_the_beta(a, b, G):
    pdf = stats.beta(a, b).pdf
    p_inf = integrate.quad(lambda p: (1 - p**G - (1 - p) ** G) * pdf(p), 0, 1)[0]
    var = integrate.quad(lambda p: p * (1 - p) * pdf(p), 0, 1)[0]
    shrink = 1 - 1 / G
    got = expected_signal(np.array([a]), np.array([b]), G, "informative")[0]
    assert got == pytest.approx(p_inf * shrink, abs=1e-6)
    got = expected_signal(np.array([a]), np.array([b]), G, "variance")[0]
    assert got == pytest.approx(var * shrink, abs=1e-6)


@settings(max_examples=30, deadline=None)
@given(p=st.floats(0.01, 0.99), G=st.integers(2, 32))
def test_a_concentrated_belief_gives_the_fixed_p_closed_form(p, G):
    c = 1e9
    a, b = np.array([c * p]), np.array([c * (1 - p)])
    got = expected_signal(a, b, G, "informative")[0]
    assert got == pytest.approx((1 - p**G - (1 - p) ** G) * (1 - 1 / G), rel=1e-5, abs=1e-9)
    # the learning model's E[s_i] for Bernoulli(p) rewards (sim/models/learning.py)
    assert expected_signal(a, b, G)[0] == pytest.approx(p * (1 - p) * (1 - 1 / G), rel=1e-6)


def test_pass_rates_of_exactly_0_or_1_give_no_signal():
    a, b = np.array([0.0, 3.0, 0.0]), np.array([5.0, 0.0, 0.0])
    for form in ("informative", "variance"):
        assert expected_signal(a, b, 8, form).tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="form"):
        expected_signal(a, b, 8, "bogus")


@settings(max_examples=30, deadline=None)
@given(a=st.floats(0.05, 50), b=st.floats(0.05, 50))
def test_population_beta_inverts_the_beta_binomial_moments(a, b):
    m = a / (a + b)
    within = a * b / ((a + b) * (a + b + 1))  # E[p(1-p)] = E[unbiased within-group variance]
    got = population_beta(m, within)
    assert got == pytest.approx((a, b), rel=1e-6)


def test_population_beta_edge_cases():
    assert population_beta(0.3, 0.0) == (0.0, 0.0)  # every group homogeneous
    assert population_beta(0.5, 0.3, c_max=100.0) == (50.0, 50.0)  # no spread: capped
    assert population_beta(0.25, None) == (0.5, 1.5)  # c = 2 assumed
    with pytest.raises(ValueError, match="mean"):
        population_beta(1.5, 0.1)


@settings(max_examples=30, deadline=None)
@given(
    values=st.lists(st.sampled_from([1, 3, 17, 100, 1000, 4096]), min_size=1, max_size=20),
    n=st.integers(1, 3),
)
def test_expected_max_is_exact_for_small_n_by_enumeration(values, n):
    pool = LengthPool(gamma=1.0)
    pool.add(np.array(values))
    x = np.array(values, dtype=float)
    grids = np.meshgrid(*([x] * n), indexing="ij")
    brute = np.maximum.reduce([g.ravel() for g in grids]).mean()
    assert pool.expected_max(n) == pytest.approx(brute)
    assert pool.mean() == pytest.approx(x.mean())


def test_length_pool_forgets_old_steps_and_round_trips():
    pool = LengthPool(gamma=0.5)
    pool.add(np.array([1000, 1000]))
    pool.add(np.array([10, 10]))
    assert pool.mean() == pytest.approx((0.5 * 2 * 1000 + 2 * 10) / 3)
    other = LengthPool(gamma=0.5)
    other.load(json.loads(json.dumps(pool.to_dict())))
    assert other.expected_max(7) == pool.expected_max(7)


# -- the controller -------------------------------------------------------------------------


def feed(ctl, G, rng, p=0.5, B=4, times=True, ids=None, rewards=True):
    """One step of random lengths, Bernoulli(p) rewards, prompt ids and times."""
    lengths = rng.integers(1, 500, size=(B, G))
    observe_step(
        ctl,
        lengths,
        rewards=(rng.random((B, G)) < p).astype(float) if rewards else None,
        prompt_ids=ids if ids is not None else rng.integers(0, 12, B),
        gen_time_s=float(lengths.max() * 0.01) if times else None,
        step_time_s=float(lengths.max() * 0.01 + lengths.sum() * 1e-4) if times else None,
    )


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    G_min=st.sampled_from([None, 2, 4, 8]),
    p=st.floats(0, 1),
    times=st.booleans(),
    rewards=st.booleans(),
)
def test_every_proposal_is_a_candidate_at_or_above_the_floor(seed, G_min, p, times, rewards):
    ctl = LAGC(candidates=(2, 4, 8, 16), G_min=G_min, seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(25):
        G = propose_step(ctl, rng.integers(0, 12, 4))
        assert G in ctl.candidates and G >= (G_min or 1)
        feed(ctl, G, rng, p, times=times, rewards=rewards)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), k=st.integers(0, 20), m=st.integers(1, 15))
def test_resume_continues_exactly_as_an_uninterrupted_run(seed, k, m):
    opts = {"candidates": (2, 4, 8, 16), "max_prompts": 6, "step_time_budget_s": 4.0}
    whole, first = LAGC(seed=seed, **opts), LAGC(seed=seed, **opts)
    rng_w, rng_f = np.random.default_rng(seed), np.random.default_rng(seed)
    for _ in range(k):
        feed(whole, whole.propose(), rng_w)
        feed(first, first.propose(), rng_f)
    resumed = LAGC(seed=seed + 1, **opts)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    for _ in range(m):
        G = whole.propose()
        assert resumed.propose() == G
        state = rng_w.bit_generator.state
        feed(whole, G, rng_w)
        rng_f.bit_generator.state = state
        feed(resumed, G, rng_f)
        assert resumed.state_dict() == whole.state_dict()
    assert resumed.steps_observed == k + m and len(resumed.prompts) <= 6


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), forget=st.sampled_from(["chosen", "to_prior"]))
def test_without_rewards_lagc_makes_exactly_sagcs_proposals(seed, forget):
    lagc, sagc = LAGC(seed=seed, forget=forget), SAGC(seed=seed, forget=forget)
    rng = np.random.default_rng(seed)
    for _ in range(60):
        G = lagc.propose()
        assert sagc.propose() == G
        lengths = rng.lognormal(5, 1, size=(3, G)).astype(int) + 1
        observe_step(lagc, lengths, gen_time_s=1.0)  # no rewards
        observe_step(sagc, lengths)
    assert lagc.sagc.state_dict() == sagc.state_dict()


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    solved=st.sampled_from([0.0, 1.0, "mixed"]),
    times=st.booleans(),
    init_G=st.sampled_from([8, 16, 32]),
)
def test_homogeneous_rewards_send_g_to_the_smallest_candidate(seed, solved, times, init_G):
    """p = 0 or 1 for every prompt: no group can be informative at any G, so the signal is
    0 everywhere and time decides; the step time grows with G (more rollouts: a longer
    expected maximum and more tokens to train on)."""
    ctl = LAGC(candidates=(2, 4, 8, 16, 32), init_G=init_G, seed=seed, tau=1e9)
    rng = np.random.default_rng(seed)
    for _ in range(12):
        G = ctl.propose()
        lengths = rng.integers(50, 5000, size=(6, G))
        p = np.array([0.0, 1.0] * 3) if solved == "mixed" else np.full(6, solved)
        rewards = np.repeat(p[:, None], G, axis=1)
        extras = {"gen_time_s": 0.01 * lengths.max(), "step_time_s": 0.01 * lengths.max() + 1}
        observe_step(ctl, lengths, rewards=rewards, **(extras if times else {}))
    assert [h[0] for h in ctl.sagc.history][-3:] == [2, 2, 2]


def signal_per_second(form, p, G, gen_s, const_s, rest_s_per_G):
    """Closed form per prompt over the step time gen_s + const_s + rest_s_per_G * G:
    ``informative``: (1 - p^G - (1-p)^G)(1 - 1/G); ``variance``: p(1-p)(1 - 1/G)."""
    per_group = (1 - p**G - (1 - p) ** G) if form == "informative" else p * (1 - p)
    return per_group * (1 - 1 / G) / (gen_s + const_s + rest_s_per_G * G)


@settings(max_examples=30, deadline=None)
@given(
    p=st.sampled_from([0.25, 0.5, 0.75]),
    gen_s=st.floats(0.5, 100),
    const_s=st.floats(0, 50),
    rest_s_per_G=st.floats(0.01, 20),
    seed=st.integers(0, 2**16),
    form=st.sampled_from(["variance", "informative"]),
)
def test_fixed_p_and_length_independent_of_g_picks_the_closed_form_optimum(
    p, gen_s, const_s, rest_s_per_G, seed, form
):
    """Every prompt has pass rate p (each group holds exactly p G successes), lengths are
    100 tokens whatever G, generation takes gen_s and the rest of the step const_s +
    rest_s_per_G G seconds: LAGC must settle on the G maximising the closed form."""
    cands = (4, 8, 16, 32)
    value = {g: signal_per_second(form, p, g, gen_s, const_s, rest_s_per_G) for g in cands}
    best = max(value, key=value.get)
    runner_up = max(v for g, v in value.items() if g != best)
    assume(value[best] > 1.01 * runner_up)
    B, L = 8, 100
    ctl = LAGC(candidates=cands, seed=seed, signal=form)
    rng = np.random.default_rng(seed)
    for _ in range(12):
        G = ctl.propose()
        rewards = np.zeros((B, G))
        rewards[:, : round(p * G)] = 1.0
        rewards = rng.permuted(rewards, axis=1)
        step_s = gen_s + const_s + rest_s_per_G * G
        observe_step(ctl, np.full((B, G), L), rewards=rewards, gen_time_s=gen_s, step_time_s=step_s)
    assert [ctl.propose() for _ in range(3)] == [best] * 3


@settings(max_examples=20, deadline=None)
@given(c0=st.floats(0, 100), c1=st.floats(0, 0.1), Gs=st.permutations([2, 4, 8]))
def test_the_rest_of_the_step_is_fitted_as_constant_plus_per_token(c0, c1, Gs):
    ctl = LAGC(candidates=(2, 4, 8), seed=0)
    for G in Gs:
        tokens = np.full((4, G), 50)
        observe_step(ctl, tokens, gen_time_s=3.0, step_time_s=3.0 + c0 + c1 * tokens.sum())
    assert ctl.rest_line() == pytest.approx((c0, c1), rel=1e-6, abs=1e-6)
    one = LAGC(seed=0)
    observe_step(one, np.full((2, 8), 50), gen_time_s=1.0, step_time_s=1.0 + 8.0)
    assert one.rest_line() == pytest.approx((8.0, 0.0))  # one G seen: a constant


def test_a_recurring_prompt_gets_its_own_posterior():
    ctl = LAGC(candidates=(2, 4, 8), prompt_decay=0.5, seed=0)
    ids = np.arange(4)
    for rewards in ([[1, 1], [0, 0], [1, 0], [0, 1]], [[1, 1], [0, 0], [0, 0], [1, 1]]):
        observe_step(ctl, np.full((4, 2), 10), rewards=np.array(rewards), prompt_ids=ids)
    a, b = ctl.belief(np.array([0, 1, 99]))
    a0, b0 = ctl.belief()[0][0], ctl.belief()[1][0]  # population (99 never seen)
    assert a.tolist() == pytest.approx([a0 + 0.5 * 2 + 2, a0, a0])
    assert b.tolist() == pytest.approx([b0, b0 + 0.5 * 2 + 2, b0])
    # prompt 0 always solved, 1 never so far: a batch of them carries less signal at
    # every G than a batch of unseen prompts (same predicted time)
    u_seen, u_pop = ctl.utilities(np.array([0, 1] * 2)), ctl.utilities()
    assert all(u_seen[g] < u_pop[g] for g in ctl.candidates)


def test_spec_parsing_and_bad_values():
    ctl = parse_controller("lagc:signal=informative,G_min=4,pop_gamma=0.8,candidates=2/4/8/16")
    assert isinstance(ctl, LAGC) and ctl.candidates == (4, 8, 16) and ctl.signal == "informative"
    assert ctl.name == "lagc:signal=informative,G_min=4,pop_gamma=0.8,candidates=2/4/8/16"
    assert parse_controller("lagc").signal == "variance"
    assert (
        parse_controller("lagc", tau=9.0).sagc.tau == 9.0
        and parse_controller("lagc").name == "lagc"
    )
    assert split_specs("static:4,lagc:signal=variance,G_min=4,sagc") == [
        "static:4",
        "lagc:signal=variance,G_min=4",
        "sagc",
    ]
    for bad, msg in [
        ("lagc:signal=bogus", "signal"),
        ("lagc:pop_gamma=0", "pop_gamma"),
        ("lagc:bogus=1", "unknown LAGC option"),
        ("sagc:signal=variance", "unknown SAGC option"),
        ("lagc:max_prompts=x", "max_prompts"),
    ]:
        with pytest.raises(ValueError, match=f"controller spec '{bad}'.*{msg}|{msg}"):
            parse_controller(bad)


def test_rewards_shaped_unlike_lengths_are_refused_before_any_update():
    ctl = LAGC(seed=0)
    before = json.dumps(ctl.state_dict())
    with pytest.raises(ValueError, match="shape of lengths"):
        ctl.observe([[1, 2], [3, 4]], rewards=[[1.0, 0.0]])
    assert json.dumps(ctl.state_dict()) == before
    assert math.isfinite(ctl.utilities()[8])


# -- LAGC through the kit a user's controller is checked with --------------------------


@pytest.mark.parametrize("spec", ["lagc", "lagc:signal=informative,max_prompts=4"])
def test_lagc_keeps_the_controller_contract(spec):
    from rolloutlab.testing import check_controller

    report = check_controller(spec, max_examples=8, max_steps=12, straggler_steps=1000)
    assert report.ok and report.results[4].status == "pass"  # its straggler budget holds
