"""Learning-progress model (sim/models/learning.py): hand-computed values and invariants."""

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.models import staleness
from rolloutlab.sim.models.learning import (
    LearningModel,
    LearningParams,
    expected_signal,
    final_reward,
    group_signal,
    saturating_shift,
    time_to_target,
)
from scipy.stats import binom

P = LearningParams(kappa=2.0, lr_ref=1e-6)
C_SAFE = math.log(31) / 30  # R_batch / (kappa_fb G_on) at the default StalenessParams

groups_st = st.lists(
    st.lists(st.sampled_from([0.0, 1.0]), min_size=1, max_size=16).map(np.array),
    min_size=1,
    max_size=8,
)


def test_update_by_hand():
    m = LearningModel(P)
    groups = [np.array([1.0, 0.0]), np.array([1.0, 1, 1, 0]), np.array([0.0, 0, 0])]
    # variances 1/4, 3/16, 0; d = 2 * (1e-6 / 1e-6) * (7/16) / 4
    assert m.update(groups, 1e-6, None, step=0, batch_size=4) == pytest.approx(0.21875)
    assert m.theta == pytest.approx(0.21875)
    # staleness 1 on the first group at eta = 0.01: factor 1 / (1 + 0.01 / C_SAFE)
    m2 = LearningModel(P)
    d = m2.update(groups, 1e-6, np.array([1, 0, 0]), step=0, batch_size=4)
    assert d == pytest.approx(2 * (0.25 / (1 + 0.01 / C_SAFE) + 3 / 16) / 4)
    assert m.current(np.array([0.5, 0.0, 1.0])) == pytest.approx(
        [1 / (1 + math.exp(-0.21875)), 0.0, 1.0]
    )


def test_expected_signal_by_hand():
    assert expected_signal(0.5, 4) == pytest.approx(0.25 * 0.75)
    assert expected_signal(0.2, 2) == pytest.approx(0.16 * 0.5)
    assert expected_signal(0.2, 1) == 0
    assert group_signal([1, 0, 0, 0]) == pytest.approx(3 / 16)
    with pytest.raises(ValueError, match="pass rate"):
        expected_signal(1.5, 4)


@settings(max_examples=30, deadline=None)
@given(
    groups=groups_st,
    p01=st.lists(st.sampled_from([0.0, 1.0]), min_size=1, max_size=8),
    lr=st.floats(1e-8, 1e-5),
    theta=st.floats(-5, 5),
)
def test_no_progress_when_homogeneous(groups, p01, lr, theta):
    m = LearningModel(P)
    homo = [np.full(len(g), g[0]) for g in groups]
    assert m.update(homo, lr, None, 0, 8) == 0.0
    m.theta = theta
    assert np.array_equal(m.current(np.array(p01)), np.array(p01))


@settings(max_examples=30, deadline=None)
@given(
    groups=groups_st,
    stale=st.integers(0, 4),
    r1=st.floats(0.01, 1.0),
    r2=st.floats(0.01, 1.0),
)
def test_monotone_in_lr_below_collapse(groups, stale, r1, r2):
    # both lrs below the stale boundary (s + 1) eta < C_SAFE and far from the horizon
    lr_max = C_SAFE / (stale + 1) / P.eta_ref * P.lr_ref
    lo, hi = sorted([r1 * lr_max * 0.99, r2 * lr_max * 0.99])
    s = np.full(len(groups), stale)
    a, b = LearningModel(P), LearningModel(P)
    for t in range(3):
        a.update(groups, lo, s, t, 8)
        b.update(groups, hi, s, t, 8)
    assert not a.collapsed and not b.collapsed
    assert a.theta <= b.theta + 1e-12


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_diminishing_returns_in_G(p):
    """Exact expectation over Binomial(G, p) outcomes, through update()."""
    per_group = []
    for G in range(1, 33):
        e = 0.0
        for k in range(G + 1):
            m = LearningModel(P)
            e += binom.pmf(k, G, p) * m.update(
                [np.r_[np.ones(k), np.zeros(G - k)]], 1e-6, None, 0, 1
            )
        assert e == pytest.approx(2 * p * (1 - p) * (1 - 1 / G))  # kappa = 2, hand formula
        per_group.append(e)
    per_group = np.array(per_group)
    per_rollout = per_group / np.arange(1, 33)
    assert np.all(np.diff(per_group) > 0)  # more samples, more signal per group ...
    assert np.all(np.diff(per_group[1:]) < np.diff(per_group[:-1]))  # ... at a falling rate
    assert np.all(np.diff(per_rollout[1:]) < 0)  # per rollout, gain falls for G >= 2


@settings(max_examples=30, deadline=None)
@given(
    groups=groups_st,
    stale=st.lists(st.integers(0, 40), min_size=8, max_size=8),
    lr=st.floats(1e-7, 5e-5),
    steps=st.integers(1, 30),
)
def test_stale_never_helps_more_than_fresh(groups, stale, lr, steps):
    fresh, old = LearningModel(P), LearningModel(P)
    s = np.array(stale[: len(groups)])
    for t in range(steps):
        df = fresh.update(groups, lr, None, t, 8)
        ds = old.update(groups, lr, s, t, 8)
        assert ds <= df + 1e-12
    assert old.theta <= fresh.theta + 1e-12


@settings(max_examples=20, deadline=None)
@given(groups=groups_st, lr=st.floats(1e-7, 2e-5), n=st.integers(0, 10))
def test_state_dict_round_trip(groups, lr, n):
    a = LearningModel(P)
    for t in range(n):
        a.update(groups, lr, np.ones(len(groups)), t, 8)
    b = LearningModel(P)
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict()
    assert a.update(groups, lr, None, n, 8) == b.update(groups, lr, None, n, 8)


def test_collapse_reverses_progress():
    g = [np.array([1.0, 0, 1, 0])]
    m = LearningModel(P)
    lr = 2 * C_SAFE / P.eta_ref * P.lr_ref  # (1 + 1) eta = 4 C_SAFE: past the boundary
    assert m.update(g, lr, np.array([1]), 0, 1) > 0  # the step that crosses still helps
    assert m.t_collapse == 1
    assert m.update(g, lr, np.array([0]), 1, 1) == pytest.approx(-2 * 2 * C_SAFE / 0.01 * 0.25)


@pytest.mark.parametrize("S", [8, 16, 32])
@pytest.mark.parametrize("mult", [0.8, 1.2, 2.0, 3.0])
def test_collapse_step_agrees_with_staleness_model(S, mult):
    """Stale-rollout collapse at the step sim.models.staleness gives (median of 4 seeds, +-1)."""
    eta = float(mult * staleness.predict_eta_max(staleness.StalenessParams(), S, 1))
    ref = [
        staleness.simulate(staleness.StalenessParams(), S, eta, 100, k).t_collapse for k in range(4)
    ]
    m = LearningModel(LearningParams(kappa=1.0, lr_ref=1.0, eta_ref=1.0))
    for t in range(100):
        m.update([np.array([0.0, 1.0])], eta, np.array([t % S]), t, 1)
    if mult < 1:
        assert ref == [None] * 4 and m.t_collapse is None
    else:
        assert abs(m.t_collapse - np.median(ref)) <= 1


def test_horizon_collapse_at_R_crit():
    m = LearningModel(LearningParams(kappa=1.0, lr_ref=1.0, eta_ref=1.0))
    for t in range(100):  # drift 0.5 per step, R_crit = 25: fires at step 51 (drift 25.5)
        m.update([np.array([0.0, 1.0])], 0.5, None, t, 1)
    assert m.t_collapse == 51


def test_bad_input():
    m = LearningModel(P)
    with pytest.raises(ValueError, match="lr"):
        m.update([np.array([1.0])], 0.0, None, 0, 1)
    with pytest.raises(ValueError, match="staleness"):
        m.update([np.array([1.0])], 1e-6, np.array([1, 2]), 0, 1)
    with pytest.raises(ValueError, match="p0"):
        m.current(np.array([np.nan]))
    with pytest.raises(ValueError, match="LearningParams"):
        LearningParams(kappa=1.0, lr_ref=-1)
    with pytest.raises(ValueError, match="kappa"):
        LearningParams.from_dict({"lr_ref": 1e-6})


STEPS = pl.DataFrame(
    {
        "step": [0, 1, 2, 3, 4, 5],
        "t_end": [1.0, 2.0, 3.0, 5.0, 8.0, 9.0],
        "reward_mean": [0.1, 0.3, 0.5, 0.6, 0.7, 0.9],
    }
)


def test_time_to_target_by_hand():
    # trailing means (window 3): -, -, 0.3, 0.4667, 0.6, 0.7333
    assert time_to_target(STEPS, 0.45, window=3) == 5.0
    assert time_to_target(STEPS, 0.6, window=3) == 8.0
    assert time_to_target(STEPS, 0.75, window=3) is None
    assert time_to_target(STEPS, 0.1, window=1) == 1.0
    assert time_to_target(STEPS, 0.0, window=7) is None  # never a full window


def test_final_reward_by_hand():
    assert final_reward(STEPS, 0.1) == pytest.approx(0.9)  # ceil(0.6) = 1 step
    assert final_reward(STEPS, 0.5) == pytest.approx((0.6 + 0.7 + 0.9) / 3)
    assert final_reward(STEPS, 1.0) == pytest.approx(3.1 / 6)
    with pytest.raises(ValueError, match="frac"):
        final_reward(STEPS, 0.0)
    with pytest.raises(ValueError, match="reward_mean"):
        final_reward(STEPS.drop("reward_mean"))


@settings(max_examples=30)
@given(
    st.floats(0.1, 5.0),
    st.lists(st.floats(0.0, 3.0), min_size=1, max_size=20),
)
def test_saturating_shift_stays_below_its_capacity_and_composes(cap, drives):
    """Each step moves theta toward theta_max, never past it; steps compose to the closed
    form theta_max (1 - exp(-sum D / theta_max)) (docs/learning.md §2)."""
    model = LearningModel(LearningParams(kappa=1.0, lr_ref=1.0, theta_max=cap))
    for t, d in enumerate(drives):
        before = model.theta
        model.apply_signal(np.array([d]), 1.0, None, t, 1)
        assert before <= model.theta <= cap
    assert model.theta == pytest.approx(cap * -math.expm1(-sum(drives) / cap), abs=1e-9)


def test_saturating_shift_by_hand_and_linear_default():
    assert saturating_shift(0.0, 1.0, math.inf) == 1.0
    assert saturating_shift(1.0, 2.0, 2.0) == pytest.approx(2 - math.exp(-1))
    assert LearningParams(kappa=1.0).theta_max == math.inf
    assert LearningParams.from_dict({"kappa": 1.0, "theta_max": None}).theta_max == math.inf
    assert LearningParams(kappa=1.0).to_dict()["theta_max"] is None
    p = LearningParams(kappa=2.0, theta_max=3.0)
    assert LearningParams.from_dict(p.to_dict()) == p
