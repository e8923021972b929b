"""The naive rules beside ``compare verl-tb``'s simulator: hand-computed predictions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rolloutlab.calibration.validation.verl_holdout import BASELINES, baselines


def test_baselines_on_a_hand_computed_run():
    gen = np.array([10.0, 12.0, 11.0, 20.0, 30.0])
    # gen = 2 + 0.5 mean + 0 max on the fit steps exactly
    lengths = np.array([[16.0, 1.0], [20.0, 3.0], [18.0, 4.0], [40.0, 5.0], [60.0, 9.0]])
    out = baselines(gen, lengths, fit_steps=3)
    assert list(out) == list(BASELINES)
    np.testing.assert_allclose(out["constant"], [11.0, 11.0])  # median of 10, 12, 11
    np.testing.assert_allclose(out["persistence"], [11.0, 11.0])  # step 2, carried forward
    np.testing.assert_allclose(out["previous_step"], [11.0, 20.0])  # steps 2 and 3
    np.testing.assert_allclose(out["linear"], [22.0, 32.0], atol=1e-9)


@given(
    n=st.integers(min_value=3, max_value=30),
    data=st.data(),
)
def test_baselines_predict_every_held_out_step(n, data):
    k = data.draw(st.integers(min_value=1, max_value=n - 1))
    rng = np.random.default_rng(n * 31 + k)
    gen = rng.uniform(1.0, 100.0, n)
    out = baselines(gen, rng.uniform(1.0, 1000.0, (n, 2)), k)
    for b in BASELINES:
        assert out[b].shape == (n - k,) and np.all(np.isfinite(out[b]))
    # the one-step rule is the measured series shifted by one step
    np.testing.assert_array_equal(out["previous_step"], gen[k - 1 : n - 1])


@pytest.mark.parametrize("k", [0, 4])
def test_baselines_refuse_an_empty_fit_or_held_out_window(k):
    with pytest.raises(ValueError, match="fit_steps"):
        baselines(np.ones(4), np.ones((4, 2)), k)
