"""calibration.fits.rolling_origin: origins, backtest errors and inverse-error weights,
checked against values worked by hand."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rolloutlab.calibration.fits.rolling_origin import (
    backtest_errors,
    combine,
    origins,
    weights,
)


def test_origins_are_shares_of_the_fit_window():
    assert origins(100) == [50, 60, 70, 80, 90]
    assert origins(20) == [10, 12, 14, 16, 18]
    # K = 3: round(1.5) = 2 (half to even), round(2.7) = 3 > K - 1: only 2 is left
    assert origins(3) == [2]
    assert origins(2) == []  # no origin leaves 2 fit steps and 1 scored step


def test_backtest_errors_by_hand():
    y = np.array([0.0, 0.0, 1.0, 1.0])

    def at(k):
        return {"mean": y[:k].mean(), "last": y[k - 1]}

    # k = 2: target mean(1, 1) = 1; mean 0 -> 1, last 0 -> 1
    # k = 3: target 1; mean 1/3 -> 2/3, last 1 -> 0
    err = backtest_errors(y, at, [2, 3])
    assert err["mean"] == pytest.approx((1 + 2 / 3) / 2)
    assert err["last"] == pytest.approx(0.5)


def test_only_scored_series_count_and_empty_origins_are_skipped():
    # two series; the second is scored only where its block mean exceeds 0.5
    y = np.array([[0.0, 0.0], [0.0, 1.0], [2.0, 0.0], [2.0, 0.0]])

    def at(k):
        return {"zero": np.zeros(2)}

    # k = 1: block means (4/3, 1/3): series 0 only, error 4/3
    # k = 3: block means (2, 0): series 0 only, error 2
    err = backtest_errors(y, at, [1, 3], scored=lambda m: np.array([True, m[1] > 0.5]))
    assert err["zero"] == pytest.approx((4 / 3 + 2) / 2)
    none = backtest_errors(y, at, [1, 3], scored=lambda m: np.zeros(2, bool))
    assert math.isnan(none["zero"])


def test_an_origin_outside_the_window_is_refused():
    with pytest.raises(ValueError, match="origin 4 outside 1..3"):
        backtest_errors(np.zeros(4), lambda k: {"a": 0.0}, [4])


def test_inverse_error_weights_by_hand():
    assert weights({"a": 1.0, "b": 3.0}) == pytest.approx({"a": 0.75, "b": 0.25})
    assert weights({"a": 1.0, "b": 3.0}, power=2.0) == pytest.approx({"a": 0.9, "b": 0.1})
    assert weights({"a": 1.0, "b": 3.0}, power=math.inf) == {"a": 1.0, "b": 0.0}
    assert weights({"a": 2.0, "b": 2.0, "c": 5.0}, power=math.inf) == {
        "a": 0.5,
        "b": 0.5,
        "c": 0.0,
    }
    assert weights({"a": 0.0, "b": 0.5}) == {"a": 1.0, "b": 0.0}  # an exact candidate
    assert weights({"a": float("nan"), "b": 0.5}) == {"a": 0.0, "b": 1.0}
    assert weights({"a": float("nan"), "b": float("nan")}) == {"a": 0.5, "b": 0.5}
    with pytest.raises(ValueError, match="power"):
        weights({"a": 1.0}, power=0.0)
    with pytest.raises(ValueError, match="negative"):
        weights({"a": -1.0})


def test_combine_by_hand():
    f = {"a": np.array([1.0, 2.0]), "b": np.array([3.0, 4.0])}
    assert combine(f, {"a": 0.75, "b": 0.25}) == pytest.approx([1.5, 2.5])
    with pytest.raises(KeyError):
        combine(f, {"c": 1.0})


errors_st = st.dictionaries(
    st.sampled_from("abcd"), st.floats(0.001, 100.0), min_size=1, max_size=4
)


@given(errors_st, st.sampled_from([0.5, 1.0, 2.0, math.inf]))
def test_weights_are_a_convex_mix_ordered_by_error(errors, power):
    w = weights(errors, power)
    assert sum(w.values()) == pytest.approx(1.0)
    assert all(v >= 0 for v in w.values())
    for a in errors:
        for b in errors:
            if errors[a] < errors[b]:
                assert w[a] >= w[b]


@given(errors_st, st.lists(st.floats(-10, 10), min_size=4, max_size=4))
def test_the_combination_lies_between_the_candidates(errors, values):
    f = {n: np.array(values["abcd".index(n)]) for n in errors}
    c = float(combine(f, weights(errors)))
    lo, hi = min(float(v) for v in f.values()), max(float(v) for v in f.values())
    assert lo - 1e-9 <= c <= hi + 1e-9
