"""The collapse-horizon law (sim.models.horizon): its two limits are PAPERS.md §2's
constraints, censored runs count, the fit recovers known constants from synthetic seeds."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.models.horizon import HorizonInputError, HorizonLaw, check_runs, fit_horizon

TRUE = HorizonLaw(R=0.02, a=1.0, C=2e-3, c=1.0, k=4.0, sigma=0.3)


def synthetic(law: HorizonLaw, T: int = 60, seeds: int = 4, rng_seed: int = 1):
    """Runs drawn from ``law`` on an S x lr grid; collapse steps beyond T are censored (NaN)."""
    rng = np.random.default_rng(rng_seed)
    S, eta = np.meshgrid([1, 2, 4, 8], [2e-4, 4e-4, 7e-4, 1e-3, 2e-3, 4e-3], indexing="ij")
    S, eta = np.repeat(S.ravel(), seeds), np.repeat(eta.ravel(), seeds)
    t = np.round(law.median(S, eta) * np.exp(law.sigma * rng.standard_normal(S.size)))
    t = np.maximum(t, 1.0)
    return S, eta, np.where(t <= T, t, np.nan), np.full(S.size, T)


def test_small_S_eta_is_the_horizon_law_and_large_is_the_first_cycle():
    # horizon limit: t eta -> R (M S eta = const), whatever S; stale limit: t <= S + 2
    for S in (1, 2, 4):
        assert TRUE.median(S, 1e-5) * 1e-5 == pytest.approx(TRUE.R, rel=0.01)
    for S in (2, 4, 8):
        assert TRUE.median(S, 0.1) <= S + 2


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 64), st.floats(1e-6, 1e-1), st.floats(1.01, 10.0))
def test_a_larger_lr_or_staleness_never_lengthens_the_horizon(S, eta, factor):
    assert TRUE.median(S, eta * factor) <= TRUE.median(S, eta) + 1e-9
    assert TRUE.median(S + 1, eta) <= TRUE.median(S, eta) + 1.0 + 1e-9  # (+1: t_0 at S = 2)


def test_the_fit_recovers_the_exponents_with_censored_runs():
    S, eta, t, T = synthetic(TRUE)
    assert np.isnan(t).sum() > 10  # many runs are censored, and are kept
    fit = fit_horizon(S, eta, t, T, n_boot=20)
    assert fit.law.a == pytest.approx(1.0, abs=0.25)
    lo, hi = fit.interval("a")
    assert lo <= hi
    med, lo_t, hi_t = fit.predict(np.array([1, 8]), np.array([1e-3, 1e-3]))
    assert np.all(lo_t <= hi_t)
    assert med[0] == pytest.approx(TRUE.median(1, 1e-3), rel=0.3)


def test_dropping_censored_runs_would_bias_the_horizon_short():
    S, eta, t, T = synthetic(TRUE)
    keep = np.isfinite(t)
    censored = fit_horizon(S, eta, t, T, n_boot=0).law
    dropped = fit_horizon(S[keep], eta[keep], t[keep], T[keep], n_boot=0).law
    # at a small lr most runs outlive T: ignoring them predicts too early a collapse
    truth = TRUE.median(1, 4e-4)
    assert abs(np.log(censored.median(1, 4e-4) / truth)) < abs(
        np.log(dropped.median(1, 4e-4) / truth)
    )


@pytest.mark.parametrize(
    ("S", "eta", "T", "words"),
    [
        ([1, 1], [1e-3, 2e-3], [60, 60], "single S"),
        ([1, 4], [1e-3, 1e-3], [60, 60], "single lr"),
        ([1, 4], [1e-3, 2e-3], [60, 100], "different step counts"),
        ([1, 4], [1e-3, float("nan")], [60, 60], "lr must be finite"),
    ],
)
def test_bad_runs_are_refused(S, eta, T, words):
    with pytest.raises(HorizonInputError, match=words):
        check_runs(S, eta, [5.0, 7.0], T)


def test_no_collapse_is_refused():
    with pytest.raises(HorizonInputError, match="no run collapsed"):
        check_runs([1, 4], [1e-3, 2e-3], [np.nan, np.nan], [60, 60])


def test_with_one_stale_S_the_S_exponent_is_held_at_the_papers():
    S, eta, t, T = synthetic(TRUE)
    keep = S <= 4
    keep &= S != 2  # S in {1, 4}: only (S-1)^c / C is identified
    fit = fit_horizon(S[keep], eta[keep], t[keep], T[keep], n_boot=3)
    assert fit.c_fixed and fit.law.c == 1.0 and all(b.c == 1.0 for b in fit.boot)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 64), st.floats(1e-6, 1e-1), st.integers(1, 6))
def test_no_collapse_is_predicted_before_the_detector_can_report_one(S, eta, patience):
    law = dataclasses.replace(TRUE, floor=float(patience))
    assert law.median(S, eta) > patience  # t_0 = max(1 or 2, floor), plus 1 / rate > 0
    if patience == 1:
        assert law.median(S, eta) == TRUE.median(S, eta)  # floor 1: the law without it
