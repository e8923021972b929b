"""Length, cost and ICC fits recover known parameters from synthetic data."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.calibration.fits.cost_fit import (
    StepDraw,
    draw_step_lengths,
    fit_decode,
    fit_learner,
    predict_gen_s,
    slope_t,
    step_features,
)
from rolloutlab.calibration.fits.icc import bundled_icc, icc_log_lengths
from rolloutlab.calibration.fits.lengths_fit import (
    StepLengthStats,
    censored_moments,
    fit_step,
    split_sigma,
)
from rolloutlab.sim.engine.core import EngineConfig
from rolloutlab.sim.engine.features import schedule_features
from rolloutlab.sim.models.cost import LinearCost

from tests.reference.engine_loop import reference_generate


@settings(max_examples=25, deadline=None)
@given(
    mu=st.floats(4.0, 6.5),
    sigma=st.floats(0.2, 1.0),
    n=st.integers(1000, 6000),
    seed=st.integers(0, 2**32 - 1),
)
def test_censored_fit_recovers_mu_sigma(mu, sigma, n, seed):
    cap = 1024
    L = np.minimum(np.ceil(np.random.default_rng(seed).lognormal(mu, sigma, n)), cap)
    s = StepLengthStats(0, L.mean(), L.max(), L.min(), float((L >= cap).mean()), n, cap)
    f = fit_step(s)
    # mu follows sigma through the mean (mu = log E[L] - sigma^2 / 2), so a relative sigma
    # error of up to 0.2 (next line) allows a mu error of about 0.2 sigma^2
    assert abs(f.mu - mu) < 0.05 + 0.2 * sigma**2
    assert abs(f.sigma / sigma - 1) < 0.2
    # the fit matches mean, extremes and clipped fraction jointly: its mean is within a
    # few standard errors of the sample mean, not equal to it
    assert abs(f.model_mean - L.mean()) < 3 * L.std() / np.sqrt(n)


def test_censored_mean_matches_monte_carlo():
    rng = np.random.default_rng(1)
    L = np.minimum(np.ceil(rng.lognormal(6.5, 0.8, 400_000)), 1024)
    m, v = censored_moments(6.5, 0.8, 1024)
    assert m == pytest.approx(L.mean(), rel=2e-3) and v == pytest.approx(L.var(), rel=1e-2)


def test_inconsistent_stats_are_refused():
    with pytest.raises(ValueError, match="step 7"):
        fit_step(StepLengthStats(7, mean=50.0, max=40.0, min=10.0, clip_ratio=0.0, n=100, cap=1024))


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 6),
    G=st.integers(1, 4),
    W=st.integers(1, 3),
    slots=st.integers(1, 5),
    dispatch=st.sampled_from(["group", "round_robin", "least_loaded"]),
    cache=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_fast_features_equal_reference_loop(n, G, W, slots, dispatch, cache, seed):
    rng = np.random.default_rng(seed)
    L, P = rng.integers(1, 30, (n, G)), rng.integers(0, 20, n)
    cfg = EngineConfig(n_workers=W, max_num_seqs=slots, dispatch=dispatch, prefix_caching=cache)
    _, ref = reference_generate(L, P, LinearCost(0.1, 0.01, 0.001, 0.002), cfg)
    np.testing.assert_allclose(schedule_features(L, P, cfg), ref)


def _draws(k: int) -> list[StepDraw]:
    rng = np.random.default_rng(3)
    return [
        StepDraw(
            step=i,
            mu=float(rng.uniform(4.0, 6.0)),
            sigma=float(rng.uniform(0.3, 0.7)),
            max=int(rng.integers(600, 1000)),
            min=int(rng.integers(5, 40)),
            n_clipped=int(rng.integers(0, 2)),
            prompt_tokens=int(rng.integers(50, 300)),
        )
        for i in range(k)
    ]


@pytest.mark.parametrize("overhead_s", [0.0, 4.0])
def test_decode_fit_recovers_known_coefficients(overhead_s):
    theta = np.array([0.01, 3e-5, 2e-8, 0.0, overhead_s])
    feats = step_features(
        _draws(12),
        0.5,
        B=32,
        G=4,
        cap=1024,
        config=EngineConfig(n_workers=2, max_num_seqs=48),
        replicates=1,
    )
    gen = predict_gen_s(feats, theta)
    fit = fit_decode(feats, gen)
    assert fit.mape < 1e-3
    np.testing.assert_allclose(fit.theta[:3], theta[:3], rtol=0.05)
    assert fit.theta[4] == pytest.approx(overhead_s, abs=0.05)


def test_learner_fit_recovers_line():
    tokens = np.linspace(1e6, 2e6, 10)
    f = fit_learner(tokens, 20.0 + 7e-5 * tokens, np.array([1.0, 2.0, 3.0]))
    assert f.learner_const_s == pytest.approx(20.0, rel=1e-6)
    assert f.learner_s_per_token == pytest.approx(7e-5, rel=1e-6)
    assert f.sync_s == 2.0 and f.r2 == pytest.approx(1.0)


def test_an_exact_line_is_identified_and_kept_when_the_slope_is_tested():
    tokens = np.array([1000.0, 1500.0, 2000.0, 2500.0])
    f = fit_learner(tokens, 3.0 + 0.002 * tokens, np.array([0.5]), min_slope_t=2.0)
    assert f.rule == "intercept+slope" and f.slope_t == np.inf
    assert f.learner_const_s == pytest.approx(3.0) and f.learner_s_per_token == pytest.approx(2e-3)
    assert "identified" in f.why() and "not identified" not in f.why()


def test_slope_t_of_three_hand_computed_points():
    # x 1,2,3 / y 1,3,2: slope 1/2, residuals -1/2, 1, -1/2, RSS 3/2 over 1 dof,
    # se^2 = (3/2) / 2 = 3/4, so t = (1/2) / sqrt(3/4) = 1/sqrt(3)
    assert slope_t(np.array([1.0, 2.0, 3.0]), np.array([1.0, 3.0, 2.0])) == pytest.approx(
        1 / np.sqrt(3)
    )
    assert np.isnan(slope_t(np.array([5.0, 5.0, 5.0]), np.array([1.0, 2.0, 3.0])))
    assert np.isnan(slope_t(np.array([1.0, 2.0]), np.array([1.0, 2.0])))


def test_a_one_setting_run_is_priced_per_token_through_the_origin():
    # tokens barely move and the learner time moves against them: NNLS alone would put the
    # whole 10 s into the constant; the tested fit prices 40 s / 4000 tokens = 0.01 s a token
    tokens = np.array([1000.0, 1010.0, 990.0, 1000.0])
    train = np.array([10.0, 9.0, 11.0, 10.0])
    sync = np.array([0.2, 0.4, 0.3])
    plain = fit_learner(tokens, train, sync)
    assert plain.learner_const_s == pytest.approx(10.0) and plain.learner_s_per_token == 0.0
    f = fit_learner(tokens, train, sync, min_slope_t=2.0)
    assert f.rule == "origin" and f.learner_const_s == 0.0
    assert f.learner_s_per_token == pytest.approx(0.01)
    assert f.sync_s == pytest.approx(0.3)
    assert f.tokens_cv == pytest.approx(np.sqrt(50.0) / 1000.0)
    assert f.why().startswith("learner through the origin: per-token slope not identified")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(100.0, 1e5), min_size=3, max_size=12),
    st.floats(1e-5, 1e-2),
    st.floats(0.01, 0.3),
    st.integers(0, 2**31),
)
def test_the_origin_price_pays_the_measured_learner_seconds_in_total(tokens, price, noise, seed):
    x = np.array(tokens)  # (n,) tokens a step
    rng = np.random.default_rng(seed)
    y = price * x * (1 + noise * rng.uniform(-1, 1, size=len(x)))  # (n,) learner s
    # noisy, so the slope's t is finite: below an infinite threshold it is never identified
    f = fit_learner(x, y, np.array([0.0]), min_slope_t=np.inf)
    assert f.rule == "origin"
    assert np.sum(f.learner_s_per_token * x) == pytest.approx(np.sum(y), rel=1e-9)
    assert f.learner_s_per_token == pytest.approx(price, rel=noise + 1e-9)


def test_step_draws_carry_the_logged_extremes():
    d = StepDraw(step=0, mu=5.5, sigma=0.4, max=900, min=40, n_clipped=0, prompt_tokens=100)
    L = draw_step_lengths(d, 0.75, 64, 5, 1024, np.random.default_rng(0))
    assert L.shape == (64, 5) and L.max() == 900 and L.min() == 40
    d2 = StepDraw(step=0, mu=5.5, sigma=0.4, max=1024, min=40, n_clipped=3, prompt_tokens=100)
    L2 = draw_step_lengths(d2, 0.75, 64, 5, 1024, np.random.default_rng(0))
    assert (L2 == 1024).sum() == 3


def test_icc_recovers_a_known_split():
    rng = np.random.default_rng(0)
    k, groups, sp, sw = 8, 400, 0.6, 0.4  # true ICC = 0.36 / 0.52
    z = sp * rng.standard_normal(groups)[:, None] + sw * rng.standard_normal((groups, k))
    df = pl.DataFrame({"idx": np.repeat(np.arange(groups), k), "chars": np.exp(6 + z.ravel())})
    assert icc_log_lengths(df) == pytest.approx(0.36 / 0.52, abs=0.05)


def test_bundled_icc_and_split_keep_total_spread():
    icc = bundled_icc()
    assert 0.6 < icc < 0.9
    sp, sw = split_sigma(0.4, icc)
    assert sp**2 + sw**2 == pytest.approx(0.16)
