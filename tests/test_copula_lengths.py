"""sim.models.copula_lengths: the marginal is the grid whatever rho, rho = 0 is i.i.d.
order statistics (exact enumeration), rho = 1 ties a group, P(straggler) falls with tau."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.calibration.fits.transfer import predicted_p
from rolloutlab.calibration.validation.measure import step_ratio
from rolloutlab.sim.models.copula_lengths import CopulaLengths
from rolloutlab.sim.models.regrouped_lengths import RegroupedLengths

GRID = np.array([[1, 2, 2, 9]])  # P(1) = 1/4, P(2) = 1/2, P(9) = 1/4


def exact_iid(values: np.ndarray, n: int, tau: float) -> float:
    """P(max/median > tau) of n i.i.d. draws from ``values`` (equally likely), by hand."""
    draws = np.array(list(itertools.product(values, repeat=n)), dtype=float)
    return float((step_ratio(draws[:, None, :]) > tau).mean())


@pytest.mark.parametrize(("B", "G"), [(3, 1), (1, 3), (2, 2)])
def test_zero_rho_is_iid_order_statistics(B, G):
    model = CopulaLengths(GRID, (0,), 0.0, 9)
    x = model.sample(np.random.default_rng(1), B * 40_000, G, 0).reshape(40_000, B, G)
    for tau in (1.5, 3.0):
        p = float((step_ratio(x) > tau).mean())
        want = exact_iid(GRID[0], B * G, tau)
        assert abs(p - want) < 4 * np.sqrt(want * (1 - want) / 40_000) + 1e-9, (tau, p, want)


@given(st.floats(0.0, 1.0), st.integers(1, 6), st.integers(0, 2**31))
@settings(max_examples=25, deadline=None)
def test_marginal_is_the_grid_whatever_rho(rho, G, seed):
    model = CopulaLengths(GRID, (0,), rho, 9)
    x = model.sample(np.random.default_rng(seed), 4000, G, 0)[:, 0]  # one sample per prompt
    for v, p in ((1, 0.25), (2, 0.5), (9, 0.25)):
        assert abs((x == v).mean() - p) < 5 * np.sqrt(p * (1 - p) / 4000)


def test_rho_one_ties_a_group_and_zero_does_not():
    grid = np.arange(1, 101)[None]
    tied = CopulaLengths(grid, (0,), 1.0, 100).sample(np.random.default_rng(0), 50, 8, 0)
    assert (tied == tied[:, :1]).all()
    free = CopulaLengths(grid, (0,), 0.0, 100).sample(np.random.default_rng(0), 50, 8, 0)
    assert (free != free[:, :1]).any()


@given(st.floats(0.0, 0.95), st.integers(0, 2**31))
@settings(max_examples=10, deadline=None)
def test_p_straggler_non_increasing_in_tau(rho, seed):
    grid = np.sort(np.random.default_rng(seed).integers(1, 200, size=(2, 64)), axis=1)
    model = CopulaLengths(grid, (0, 5), rho, 200)
    p = predicted_p(model, 4, 4, (1.5, 2.0, 3.0, 6.0), 50, seed)
    assert np.all(np.diff(p, axis=1) <= 0)


def test_steps_pick_their_row_and_sample_ids_is_g_invariant():
    grid = np.array([[1] * 4, [5] * 4, [9] * 4])
    model = CopulaLengths(grid, (0, 10, 20), 0.3, 9)
    assert model.row([-3, 0, 9, 10, 19, 20, 99]).tolist() == [0, 0, 0, 1, 1, 2, 2]
    assert (model.sample(np.random.default_rng(0), 2, 3, 15) == 5).all()
    ids = np.arange(5)
    assert np.array_equal(model.sample_ids(3, 12, ids, 4)[:, :2], model.sample_ids(3, 12, ids, 2))


@pytest.mark.parametrize(
    ("grid", "steps", "rho", "cap"),
    [
        (np.array([[1, 2]]), (0,), 1.5, 9),
        (np.array([[2, 1]]), (0,), 0.5, 9),
        (np.array([[1, 20]]), (0,), 0.5, 9),
        (np.array([[1, 2]]), (0, 1), 0.5, 9),
        (np.array([[1, 2], [1, 2]]), (1, 1), 0.5, 9),
    ],
)
def test_bad_parameters_are_refused(grid, steps, rho, cap):
    with pytest.raises(ValueError, match="CopulaLengths"):
        CopulaLengths(grid, steps, rho, cap)


# RegroupedLengths: a logged step's pooled lengths dealt into groups


def test_regrouped_full_draw_is_the_logged_step():
    x = np.arange(1, 25)
    model = RegroupedLengths((x,), (0,), 0.5, 4, 6, 24)
    out = model.sample(np.random.default_rng(0), 12, 4, 0).reshape(2, 6, 4)
    for step in out:
        assert sorted(step.ravel().tolist()) == x.tolist()


def test_regrouped_rho_one_deals_consecutive_order_statistics():
    x = np.random.default_rng(1).permutation(np.arange(1, 41))
    out = RegroupedLengths((x,), (0,), 1.0, 4, 10, 40).sample(np.random.default_rng(2), 10, 4, 0)
    s = np.sort(out, axis=1)
    assert (s[:, -1] - s[:, 0] == 3).all() and (s[:, 0] % 4 == 1).all()


@pytest.mark.parametrize("G", [1, 2])
def test_regrouped_rho_zero_is_subsampling_without_replacement(G):
    x = np.array([1, 2, 3, 9])
    model = RegroupedLengths((x,), (0,), 0.0, 2, 2, 9)
    got = step_ratio(model.sample(np.random.default_rng(3), 2 * 30_000, G, 0).reshape(-1, 2, G))
    subsets = np.array(list(itertools.combinations(x, 2 * G)), dtype=float)
    for tau in (1.2, 2.5):
        want = float((step_ratio(subsets[:, None, :]) > tau).mean())
        assert abs((got > tau).mean() - want) < 4 * np.sqrt(want * (1 - want) / 30_000) + 1e-9


def test_regrouped_refuses_bad_draws():
    model = RegroupedLengths((np.arange(1, 9),), (0,), 0.5, 4, 2, 9)
    for n, G in ((3, 2), (2, 5), (2, 0)):
        with pytest.raises(ValueError, match="RegroupedLengths"):
            model.sample(np.random.default_rng(0), n, G, 0)
    with pytest.raises(ValueError, match="fewer than batch"):
        RegroupedLengths((np.arange(1, 9),), (0,), 0.5, 4, 3, 9)


def test_p_straggler_is_not_monotone_in_g_in_general():
    # lengths 1 or 10, equally likely, rho = 0, B = 1: max/median > 5 needs exactly one 10
    # among 3 draws (3/8) but a median of 1 among 4 draws, i.e. one 10 (4/16): P falls with G
    assert exact_iid(np.array([1, 10]), 3, 5.0) == 0.375
    assert exact_iid(np.array([1, 10]), 4, 5.0) == 0.25
    model = CopulaLengths(np.array([[1, 10]]), (0,), 0.0, 10)
    p = predicted_p(model, 1, 4, (5.0,), 20_000, 0)[:, 0]
    assert abs(p[2] - 0.375) < 0.02 and abs(p[3] - 0.25) < 0.02 and p[3] < p[2]
