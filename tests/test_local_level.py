"""The local level model: Kalman filter limits, the steady-state gain, q recovered."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.calibration.fits.local_level import LocalLevel, filter_level, fit_local_level
from rolloutlab.calibration.validation.forecast import local_level_forecast


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-50, 50), min_size=2, max_size=40), st.integers(1, 3))
def test_a_level_that_never_moves_is_the_mean_of_every_step(values, n):
    # q = 0 with the first value as a one-observation prior: the recursive mean
    y = np.tile(np.asarray(values)[:, None], (1, n))
    level, _ = filter_level(y, 0.0)
    np.testing.assert_allclose(level, np.mean(values), atol=1e-9)


def test_a_level_that_follows_every_step_is_the_last_value():
    y = np.array([[1.0, 5.0], [3.0, 2.0], [8.0, -1.0]])
    level, _ = filter_level(y, 1e8)
    np.testing.assert_allclose(level, [8.0, -1.0], atol=1e-6)


@given(st.floats(1e-5, 1e3))
def test_steady_state_gain_solves_the_riccati_equation(q):
    # the steady state of P <- (P + q) (1 - (P + q) / (P + q + 1)): gain^2 = q (1 - gain)
    k = LocalLevel(q=q, level=np.zeros(1)).gain
    assert 0 < k < 1
    assert k * k == pytest.approx(q * (1 - k), rel=1e-9)


@pytest.mark.parametrize("q", [0.01, 0.2])
def test_signal_to_noise_ratio_is_recovered_from_a_simulated_walk(q):
    rng = np.random.default_rng(3)
    T, n = 1500, 4
    level = np.cumsum(rng.normal(0, np.sqrt(q), (T, n)), axis=0)
    y = level + rng.normal(0, 1, (T, n))
    fit = fit_local_level(y)
    assert q / 1.6 < fit.q < q * 1.6


def test_series_that_never_vary_do_not_pull_q_to_zero():
    rng = np.random.default_rng(0)
    walk = np.cumsum(rng.normal(0, 0.5, 400)) + rng.normal(0, 1, 400)
    flat = np.zeros(400)
    alone = fit_local_level(walk).q
    both = fit_local_level(np.stack([walk, flat, flat], axis=1))
    assert both.q == pytest.approx(alone, rel=1e-6)
    assert both.level[1] == 0.0


def test_fit_series_selects_the_series_q_is_fitted_on():
    rng = np.random.default_rng(1)
    moving = np.cumsum(rng.normal(0, 1, 300)) + rng.normal(0, 1, 300)
    still = rng.normal(0, 1, 300)
    y = np.stack([moving, still], axis=1)
    on_moving = fit_local_level(y, np.array([True, False]))
    on_still = fit_local_level(y, np.array([False, True]))
    assert on_moving.q > 100 * on_still.q


def test_bad_series_are_refused():
    with pytest.raises(ValueError, match="at least 2 steps"):
        fit_local_level(np.ones((1, 3)))
    with pytest.raises(ValueError, match="NaN"):
        fit_local_level(np.array([1.0, np.nan, 2.0]))


def test_forecast_of_p_is_clipped_and_held_for_every_later_step():
    # a P series that rises to 1 and a makespan that never moves
    p = np.linspace(0.5, 1.0, 20)[:, None, None] * np.ones((1, 2, 3))
    span = np.full(20, 40.0)
    p_new, span_new = local_level_forecast(p, span, 5)
    assert p_new.shape == (5, 2, 3) and span_new.shape == (5,)
    assert (p_new <= 1.0).all() and (p_new == p_new[0]).all()
    assert (span_new == 40.0).all()
