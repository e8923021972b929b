"""The learning law's gradient-noise term (sim.models.learning_noise, docs/learning.md §2)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.models.learning import LearningModel, LearningParams
from rolloutlab.sim.models.learning_noise import (
    design_effect,
    effective_samples,
    efficiency,
    expected_group_signal,
    informative_samples,
    noise_multiplier,
    noisy_drive,
    step_signal,
)

GROUPS = [np.array([1.0, 0, 0, 1]), np.array([1.0, 1, 1, 0]), np.array([0.0, 0, 0, 0])]


def _step(params, groups, seed=0, B=8):
    m = LearningModel(params, seed=seed)
    return m.update(groups, 1e-6, None, 0, B)


def test_zero_noise_is_the_mean_field_law_exactly():
    # hand computation: variances 0.25, 0.1875, 0 -> kappa * 0.4375 / 8
    d0 = _step(LearningParams(kappa=2.0), GROUPS)
    assert d0 == pytest.approx(2.0 * (0.25 + 0.1875) / 8)
    assert _step(LearningParams(kappa=2.0, b_noise=0.0), GROUPS) == d0


def test_large_batch_limit_reproduces_the_mean_field_step():
    # the same mean signal over 4000x the groups: the noisy step tends to the mean-field one
    p = LearningParams(kappa=2.0, b_noise=50.0)
    big = [g for _ in range(4000) for g in GROUPS]
    mf = _step(LearningParams(kappa=2.0), big, B=8 * 4000)
    d = [_step(p, big, seed=s, B=8 * 4000) for s in range(5)]
    assert np.allclose(d, mf, rtol=0.15)  # relative sd sqrt(50 / 24000) = 0.05
    x = noise_multiplier(np.random.default_rng(0), np.full(1000, 1e12), 50.0)
    assert noisy_drive(mf, 1e12, 50.0, x) == pytest.approx(np.full(1000, mf), rel=1e-3)
    # small batch, same b_noise: expected share n / (n + b_noise) = 8 / 58, and noisy
    small = [_step(p, GROUPS, seed=s) for s in range(400)]
    assert np.mean(small) == pytest.approx(2.0 * 0.4375 / 8 * 8 / 58, rel=0.25)
    assert np.std(small) > 0


def test_seeds_spread_and_a_seed_repeats():
    p = LearningParams(kappa=2.0, b_noise=20.0)
    assert _step(p, GROUPS, seed=1) == _step(p, GROUPS, seed=1)
    assert _step(p, GROUPS, seed=1) != _step(p, GROUPS, seed=2)


def test_zero_informative_samples_give_zero_progress():
    p = LearningParams(kappa=5.0, b_noise=10.0)
    assert _step(p, [np.ones(4), np.zeros(4)]) == 0.0
    assert noisy_drive(1.0, 0.0, 10.0, 3.0) == 0.0


def test_noise_multiplier_has_mean_one_and_the_stated_spread():
    x = noise_multiplier(np.random.default_rng(1), np.full(40000, 25.0), 100.0)
    assert x.min() >= 0
    assert x.mean() == pytest.approx(1.0, abs=0.02) and x.std() == pytest.approx(2.0, rel=0.03)


@settings(max_examples=60, deadline=None)
@given(
    mu=st.floats(0.0, 5.0),
    n=st.floats(0.0, 1e4),
    extra=st.floats(0.0, 1e4),
    b_noise=st.floats(0.0, 1e4),
)
def test_more_informative_samples_never_slow_expected_progress(mu, n, extra, b_noise):
    # E[D] = noisy_drive at x = 1 (x has mean 1 and enters linearly)
    assert noisy_drive(mu, n + extra, b_noise, 1.0) >= noisy_drive(mu, n, b_noise, 1.0) - 1e-12
    assert 0.0 <= efficiency(n, b_noise) <= 1.0


@settings(max_examples=40, deadline=None)
@given(
    k=st.lists(st.integers(0, 4), min_size=1, max_size=6),
    k_new=st.integers(1, 3),
    b_noise=st.floats(0.1, 500.0),
)
def test_adding_an_informative_group_never_lowers_expected_progress(k, k_new, b_noise):
    var = np.array([(j / 4) * (1 - j / 4) for j in k])
    more = np.r_[var, (k_new / 4) * (1 - k_new / 4)]

    def expected(v):
        mu = step_signal(v, "std").sum() / 8
        return float(noisy_drive(mu, 4 * (v > 0).sum(), b_noise, 1.0))

    assert expected(more) >= expected(var) - 1e-12


def test_std_advantage_signal_and_its_expectation():
    assert step_signal([0.25, 0.0], "std") == pytest.approx([0.5, 0.0])
    p = np.array([0.1, 0.5, 0.9])
    # G = 2: only k = 1 is informative, s = 1/4, sqrt = 1/2, P = 2 p (1 - p)
    assert expected_group_signal(p, 2, "std") == pytest.approx(p * (1 - p))
    assert expected_group_signal(p, 8, "mean") == pytest.approx(p * (1 - p) * 7 / 8)
    with pytest.raises(ValueError, match="advantage"):
        step_signal([0.1], "rank")


def test_older_learning_block_reads_as_the_mean_field_law():
    old = {"kappa": 9.38, "lr_ref": 1e-6, "eta_ref": 0.01, "reversal": 1.0,
           "theta_max": None, "provenance": {"command": "x"}}  # fmt: skip
    p = LearningParams.from_dict(old)
    assert p.b_noise == 0.0 and p.advantage == "mean"
    new = LearningParams.from_dict(p.to_dict() | {"b_noise": 12.5, "advantage": "std"})
    assert (new.b_noise, new.advantage) == (12.5, "std")
    for bad in ({"b_noise": -1.0}, {"b_noise": float("nan")}, {"advantage": "rank"}):
        with pytest.raises(ValueError):
            LearningParams.from_dict(old | bad)


def test_noise_needs_group_sizes_and_resumes():
    m = LearningModel(LearningParams(kappa=1.0, b_noise=5.0), seed=3)
    with pytest.raises(ValueError, match="samples"):
        m.apply_signal(np.array([0.25]), 1e-6, None, 0, 1)
    m.update(GROUPS, 1e-6, None, 0, 8)
    state = m.state_dict()
    nxt = m.update(GROUPS, 1e-6, None, 1, 8)
    again = LearningModel(LearningParams(kappa=1.0, b_noise=5.0), seed=3)
    again.load_state_dict(state)
    assert again.update(GROUPS, 1e-6, None, 1, 8) == nxt


def test_simulator_tracker_draws_noise_per_seed_and_per_mini_batch():
    from rolloutlab.sim.models.rewards import RewardTracker, learning_params, reward_config

    cfg = reward_config("beta:1,1", None, learning_params({"kappa": 2.0, "b_noise": 16.0}))
    groups = GROUPS[:2] * 4  # 8 groups, both informative

    def shift(seed, K):
        return RewardTracker(cfg, seed=seed, lr=1e-6, batch_size=8, updates=K).learn(groups, 0)

    assert shift(1, 1) == shift(1, 1) and shift(1, 1) != shift(2, 1)
    tracker = RewardTracker(cfg, seed=1, lr=1e-6, batch_size=8, updates=2)
    tracker.learn(groups, 0)
    assert tracker.model.updates == 2  # one noise draw per mini-batch update
    old = reward_config("beta:1,1", None, learning_params({"kappa": 2.0}))  # pre-noise: no spread
    a = RewardTracker(old, seed=1, lr=1e-6, batch_size=8).learn(groups, 0)
    assert a == RewardTracker(old, seed=2, lr=1e-6, batch_size=8).learn(groups, 0)


def test_design_effect_by_hand_and_its_limits():
    # Kish: a group of 5 at rho 0.25 counts 5 / (1 + 4 * 0.25) = 2.5 samples
    assert design_effect(5, 0.25) == pytest.approx(2.0)
    assert effective_samples(3, 5, 0.25) == pytest.approx(7.5)
    assert effective_samples(3, 5, 0.0) == pytest.approx(15.0)  # every response
    assert effective_samples(3, 5, 1.0) == pytest.approx(3.0)  # every prompt once
    # informative groups only: the homogeneous third group adds nothing
    var = [step_signal_var(g) for g in GROUPS]
    assert informative_samples(var, [4, 4, 4], 0.5) == pytest.approx(2 * 4 / 2.5)
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="rho"):
            design_effect(4, bad)


def step_signal_var(rewards):
    return float(np.var(rewards))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 5), st.integers(0, 4), st.floats(0.0, 1.0), st.floats(0.0, 1.0)
)  # fmt: skip
def test_at_equal_rollouts_more_prompts_never_count_fewer_samples(i, j, rho, rho2):
    """B G fixed: halving G (doubling B) never lowers the effective samples, and a larger
    rho never raises them."""
    G = 2 ** (j + 1)
    B = 2**i
    small, big = effective_samples(2 * B, G / 2, rho), effective_samples(B, G, rho)
    assert small >= big - 1e-9
    lo, hi = sorted((rho, rho2))
    assert effective_samples(B, G, hi) <= effective_samples(B, G, lo) + 1e-9
    assert B - 1e-9 <= effective_samples(B, G, hi) <= B * G + 1e-9


def test_rho_in_params_reads_old_blocks_and_slows_big_groups():
    old = {"kappa": 1.0, "b_noise": 10.0, "advantage": "std"}
    assert LearningParams.from_dict(old).rho == 0.0
    p = LearningParams.from_dict(old | {"rho": 0.5})
    assert LearningParams.from_dict(p.to_dict()) == p
    with pytest.raises(ValueError, match="rho"):
        LearningParams(kappa=1.0, rho=1.2)
    # the same 16 informative responses: 4 groups of 4 beat 2 groups of 8 at rho > 0; the
    # model's mean drive over seeds is the mean-field drive times n_eff / (n_eff + b_noise)
    p = LearningParams(kappa=1.0, b_noise=10.0, rho=0.5)
    for (n, G), deff in (((4, 4), 2.5), ((2, 8), 4.5)):
        groups = [np.array([1.0] + [0.0] * (G - 1))] * n
        mf = _step(LearningParams(kappa=1.0), groups, B=n)
        mean = np.mean([_step(p, groups, seed=s, B=n) for s in range(3000)])
        n_eff = 16 / deff
        assert mean / mf == pytest.approx(n_eff / (n_eff + 10.0), rel=0.08)
