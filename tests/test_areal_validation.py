"""bench/areal_scaling_validation.py: the length model fitted to AReaL's logged statistics
and the one-scale calibration error."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

_PATH = Path(__file__).resolve().parents[1] / "bench" / "areal_scaling_validation.py"
_SPEC = importlib.util.spec_from_file_location("areal_scaling_validation", _PATH)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def test_lengths_hit_the_logged_mean_and_truncated_share():
    lengths = bench.areal_lengths(mean=7834.0, truncated=0.1238, cap=27648)
    x = lengths.sample(np.random.default_rng(0), 4000, 16, 0)
    assert x.max() == 27648
    assert (x >= 27648).mean() == pytest.approx(0.1238, abs=0.01)
    assert x.mean() == pytest.approx(7834.0, rel=0.03)
    # icc splits the log variance: equal halves at 0.5
    assert lengths.sigma_prompt == pytest.approx(lengths.sigma_within)


@pytest.mark.parametrize(
    "kw", [{"truncated": 0.0}, {"truncated": 1.0}, {"mean": 30_000.0}, {"icc": 1.5}]
)
def test_lengths_reject_impossible_statistics(kw):
    with pytest.raises(ValueError):
        bench.areal_lengths(**kw)


def test_errors_by_hand():
    # simulated 100, 50, 20 against published 200, 120, 50, calibrated on the first:
    # predictions 200, 100, 40 -> 0, -1/6, -0.2
    assert bench.errors([100, 50, 20], [200, 120, 50], 0) == pytest.approx([0, -1 / 6, -0.2])
    with pytest.raises(ValueError):
        bench.errors([1, 2], [1], 0)
    with pytest.raises(ValueError):
        bench.errors([1, 0], [1, 1], 0)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(1, 1e4), min_size=2, max_size=5),
    st.floats(0.1, 10),
    st.data(),
)
def test_a_simulator_off_by_one_factor_has_no_error(pubs, factor, data):
    cal = data.draw(st.integers(0, len(pubs) - 1))
    errs = bench.errors([p * factor for p in pubs], pubs, cal)
    assert errs == pytest.approx([0.0] * len(pubs), abs=1e-9)


def test_the_curve_falls_with_gpus():
    # one short run per end of the 1.5B curve: more GPUs, shorter steps
    model = bench.CURVES["1.5B"][0]
    assert bench.simulate(model, 128, 2, 0) < bench.simulate(model, 32, 2, 0)
