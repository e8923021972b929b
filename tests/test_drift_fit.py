"""The drifting length model: Tobit lines per quantile level, a line of rho, forecasts."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.calibration.fits.drift_fit import (
    DriftFit,
    fit_drift,
    summarise_aggregates,
    summarise_groups,
    tobit_line,
)
from rolloutlab.calibration.fits.lengths_fit import censored_moments
from rolloutlab.calibration.validation.forecast import naive
from rolloutlab.sim.models.copula_lengths import CopulaLengths


def test_tobit_without_censoring_is_least_squares():
    t = np.arange(10.0)
    y = 1.0 + 0.3 * t + np.array([0.1, -0.2, 0.05, 0.0, 0.3, -0.1, 0.2, -0.3, 0.1, -0.15])
    a, b, _ = tobit_line(t, y, np.zeros(10, bool), c=100.0)
    b_ref, a_ref = np.polyfit(t, y, 1)
    assert (a, b) == pytest.approx((a_ref, b_ref))


def test_tobit_recovers_a_slope_that_runs_into_the_cap():
    rng = np.random.default_rng(3)
    t = np.arange(60.0)
    latent = 2.0 + 0.05 * t + rng.normal(0, 0.2, t.size)
    c = 4.0  # the line crosses the cap at t = 40
    y, cens = np.minimum(latent, c), latent >= c
    a, b, s = tobit_line(t, y, cens, c)
    b_clipped = np.polyfit(t, y, 1)[0]  # treating capped values as measured flattens the line
    assert abs(b - 0.05) < 0.005
    assert b_clipped < 0.045
    assert s == pytest.approx(0.2, rel=0.3)


def test_every_value_censored_sits_at_the_cap():
    a, b, _ = tobit_line(np.arange(5.0), np.full(5, 3.0), np.ones(5, bool), c=3.0)
    assert (a, b) == (3.0, 0.0)


def test_step_quantiles_by_hand():
    s = summarise_groups([7], [[np.array([1, 2]), np.array([3, 4])]], cap=4, levels=4)
    # levels 1/8, 3/8, 5/8, 7/8 of {1, 2, 3, 4}: the inverted cdf gives each value once
    assert np.exp(s.log_q[0]).round().tolist() == [1, 2, 3, 4]
    assert s.censored[0].tolist() == [False, False, False, True]
    assert summarise_groups([7], [[np.array([1, 2])]], cap=4, censor=False).censored.sum() == 0


def test_default_rows_are_each_steps_sorted_lengths():
    groups = [
        [np.array([9, 3, 5]), np.array([1, 7, 2])],
        [np.array([4, 4, 8]), np.array([6, 2, 2])],
    ]
    s = summarise_groups([0, 1], groups, cap=100)
    assert np.exp(s.log_q).round().tolist() == [[1, 2, 3, 5, 7, 9], [2, 2, 4, 4, 6, 8]]


def test_identical_groups_have_rho_one_and_mixed_rho_zero_or_below():
    same = [np.array([5, 5, 5]), np.array([9, 9, 9]), np.array([2, 2, 2])]
    mixed = [np.array([2, 9, 5]), np.array([9, 2, 5]), np.array([5, 9, 2])]
    s = summarise_groups([0, 1], [same, mixed], cap=10)
    assert s.rho[0] == pytest.approx(1.0, abs=1e-9)
    assert s.rho[1] == 0.0


def _drifting_steps(T, growth, rng, B=16, G=8, cap=10_000):
    steps = list(range(T))
    per_step = [
        [np.ceil(np.exp(rng.normal(3.0 + growth * t, 0.5, G))).astype(int) for _ in range(B)]
        for t in steps
    ]
    return steps, per_step, cap


def test_forecast_follows_a_drift_the_static_fit_misses():
    rng = np.random.default_rng(1)
    steps, per_step, cap = _drifting_steps(40, 0.02, rng)
    summary = summarise_groups(steps[:30], per_step[:30], cap)
    drift = fit_drift(summary, window=30)
    median_level = summary.log_q.shape[1] // 2
    truth = 3.0 + 0.02 * 39  # median of log length at step 39
    assert drift.log_quantiles(39)[median_level] == pytest.approx(truth, abs=0.08)
    static = drift.static(summary)
    assert np.all(static.slope == 0.0)
    assert static.log_quantiles(39)[median_level] < truth - 0.2


def test_forecast_model_serves_each_step_its_own_row_and_rho():
    rng = np.random.default_rng(2)
    steps, per_step, cap = _drifting_steps(10, 0.05, rng)
    drift = fit_drift(summarise_groups(steps, per_step, cap))
    model = drift.lengths_model([20, 30])
    assert model.steps == (20, 30)
    assert len(model.rho) == 2
    assert np.median(model.sample(rng, 400, 4, 30)) > np.median(model.sample(rng, 400, 4, 20))


def test_per_row_rho_ties_groups_only_where_it_is_one():
    q = np.tile(np.arange(1, 101), (2, 1))
    model = CopulaLengths(quantiles=q, steps=(0, 5), rho=(0.0, 1.0), max_response_length=100)
    rng = np.random.default_rng(0)
    tied = model.sample(rng, 50, 4, 5)
    free = model.sample(rng, 50, 4, 0)
    assert np.all(tied == tied[:, :1])
    assert np.any(free != free[:, :1])
    ids = model.sample_ids(0, np.array([3, 7]), np.array([1, 2]), 4)  # steps 3 -> row 0, 7 -> row 1
    assert np.all(ids[1] == ids[1, 0])
    with pytest.raises(ValueError, match="3 rho values for 2 rows"):
        CopulaLengths(quantiles=q, steps=(0, 5), rho=(0.0, 0.5, 1.0), max_response_length=100)


def test_aggregate_forecast_is_the_censored_lognormal_of_the_lines():
    s = summarise_aggregates([0, 1, 2], [5.0, 5.1, 5.2], [0.4, 0.4, 0.4], cap=1024)
    drift = fit_drift(s)
    mean, mx = drift.aggregates(np.array([4]), n=5120)
    assert mean[0] == pytest.approx(censored_moments(5.4, 0.4, 1024)[0], rel=1e-6)
    z = 3.6433  # Phi^-1(2^(-1/5120)) = Phi^-1(1 - 1.3538e-4), from a normal table
    assert mx[0] == pytest.approx(min(np.ceil(np.exp(5.4 + 0.4 * z)), 1024), abs=2)
    assert drift.rho(4, default=0.3) == 0.3


def test_naive_rules_by_hand():
    series = np.arange(20.0)  # value = step
    fit_t, new_t = np.arange(20), np.array([25])
    rules = naive(series, fit_t, new_t, window=5)
    assert rules["persistence"][0] == pytest.approx(np.mean(np.arange(10, 20)))
    assert rules["linear"][0] == pytest.approx(25.0)
    assert naive(series / 20, fit_t, new_t, 5, (0.0, 1.0))["linear"][0] == 1.0


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(-2.0, 2.0), min_size=4, max_size=4),
    st.lists(st.floats(-0.2, 0.2), min_size=4, max_size=4),
    st.integers(0, 200),
)
def test_forecast_rows_are_sorted_and_within_one_and_the_cap(intercepts, slopes, step):
    fit = DriftFit(
        intercept=np.array(intercepts) + 3.0,
        slope=np.array(slopes),
        scale=np.full(4, 0.1),
        rho_intercept=0.5,
        rho_slope=0.01,
        step0=0,
        cap=72,
        fit_steps=(0, 1),
    )
    q = fit.lengths_model([step]).quantiles[0]
    assert np.all(np.diff(q) >= 0)
    assert 1 <= q.min() and q.max() <= 72
    assert 0.0 <= fit.rho(step) <= 0.99
