"""The horizon law's stale drift multiplier D: a mechanism moves the horizon of
stale runs (S >= 2) only, the fit recovers D by likelihood, and the likelihood-ratio test
against the pooled law (D = 1) separates data drawn with and without it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.analysis.collapse.horizon import drift_test, fit_mechanisms, read_grids
from rolloutlab.sim.models.horizon import fit_from_dict, fit_horizon_groups

from tests.test_horizon_compare import compare_horizon, write_grid
from tests.test_horizon_law import TRUE, synthetic

FAST = dataclasses.replace(TRUE, drift=3.0)
"""A mechanism whose stale runs drift 3x faster (e.g. the clip off)."""


def test_the_multiplier_moves_only_the_horizon_of_stale_runs():
    eta = 1e-5  # the horizon limit: t - t_0 = R / (D eta^a)
    assert FAST.median(1, eta) == TRUE.median(1, eta)  # S = 1: no stale drift
    for S in (2, 4, 8):
        ratio = (TRUE.median(S, eta) - 2) / (FAST.median(S, eta) - 2)
        assert ratio == pytest.approx(3.0, rel=1e-3)
    assert dataclasses.replace(TRUE, drift=1.0) == TRUE  # D = 1 is the law without it


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 64), st.floats(1e-6, 1e-1), st.floats(1.01, 10.0))
def test_a_faster_stale_drift_never_lengthens_the_horizon(S, eta, factor):
    slow = dataclasses.replace(TRUE, drift=0.5)
    faster = dataclasses.replace(slow, drift=0.5 * factor)
    assert faster.median(S, eta) <= slow.median(S, eta) + 1e-9


def _two_mechanisms(second, rng_seed: int = 2):
    a, b = synthetic(TRUE, rng_seed=1), synthetic(second, rng_seed=rng_seed)
    S, eta, t, T = (np.concatenate([x, y]) for x, y in zip(a, b))
    return S, eta, t, T, np.repeat([0, 1], len(a[0]))


def test_the_fit_recovers_the_drift_ratio_of_two_mechanisms():
    fits = fit_horizon_groups(*_two_mechanisms(FAST), n_boot=0, drift=True)
    on, off = fits[0].law, fits[1].law
    assert on.R == off.R and on.a == off.a  # the horizon constants stay shared
    assert off.drift / on.drift == pytest.approx(3.0, rel=0.35)
    pooled = fit_horizon_groups(*_two_mechanisms(FAST), n_boot=0)
    assert pooled[0].law.drift == pooled[1].law.drift == 1.0  # the old law: no D


def _grids(tmp_path, second):
    tmp_path.mkdir(exist_ok=True)
    a = write_grid(tmp_path / "on", TRUE, 60, True, "token", 1)
    b = write_grid(tmp_path / "off", second, 60, False, "token", 2)
    return read_grids([a, b]), (a, b)


def test_the_likelihood_ratio_test_finds_a_drift_only_where_there_is_one(tmp_path):
    df, _ = _grids(tmp_path / "d", FAST)
    found = drift_test(df)
    assert found["p_value"] < 0.01 and found["aic_difference"] < 0
    assert found["drift"]["clip-off/is-token"] > found["drift"]["clip-on/is-token"]
    df0, _ = _grids(tmp_path / "n", dataclasses.replace(TRUE, C=5e-4))  # only C differs
    none = drift_test(df0)
    assert none["p_value"] > 0.05 and none["statistic"] >= 0


def test_compare_horizon_drift_law_reports_the_test(tmp_path):
    _, (a, b) = _grids(tmp_path, FAST)
    summary, output = compare_horizon([a, b], tmp_path / "o", "--bootstrap", "0", "--law", "drift")
    assert "likelihood ratio" in output
    assert summary["law"] == "drift" and summary["drift_test"]["dof"] == 2
    assert summary["held_out"]["agreement"] >= 0.85  # drawn from the law, sigma 0.3


def test_a_law_written_before_the_multiplier_reads_back_with_D_1():
    old = {"law": {"R": 0.02, "a": 1.0, "C": 2e-3, "c": 1.0, "k": 4.0, "sigma": 0.3}}
    assert fit_from_dict(old).law == TRUE  # no "drift" field: D = 1
    assert fit_from_dict({"law": {**old["law"], "drift": 3.0}}).law == FAST


def test_an_unknown_law_is_refused(tmp_path):
    df, _ = _grids(tmp_path, FAST)
    with pytest.raises(ValueError, match="not one of"):
        fit_mechanisms(df, 0, "nonsense")
