"""calibration.validation.groups: subsampling expectation, straggler ratio, and the
validation passing on data from the model and failing on data with another ICC."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest
from rolloutlab.calibration.readers.grouped import GroupedDataError, GroupedTrace
from rolloutlab.calibration.validation.groups import (
    COLUMNS,
    ValidationConfig,
    fit_data,
    measure,
    step_ratio,
    straggler_prob_exact,
    subsample,
    validate_groups,
)
from rolloutlab.sim.models.lengths import LognormalLengths
from rolloutlab.sim.trace.metrics import straggler_ratio

from tests.groups_helpers import lognormal_trace


def test_step_ratio_is_the_metric_straggler_ratio():
    x = np.random.default_rng(0).integers(1, 500, size=(7, 5, 3))
    assert np.allclose(step_ratio(x), [straggler_ratio(s) for s in x])


def test_exact_subsampling_expectation_by_hand():
    # two groups; G = 1 picks one of each: 4 equally likely steps
    # (1,3): 3/2, (1,9): 9/5, (2,3): 3/2.5, (2,9): 9/5.5 -> two of four above tau = 1.6
    m = np.array([[1, 2], [3, 9]])
    assert straggler_prob_exact(m, 1, 1.6) == 0.5
    # G = 2 keeps everything: ratio 9 / 2.5 = 3.6
    assert straggler_prob_exact(m, 2, 3.5) == 1.0 and straggler_prob_exact(m, 2, 3.7) == 0.0


@pytest.mark.parametrize("G", [1, 2])
def test_monte_carlo_subsampling_converges_to_the_exact_expectation(G):
    m = np.array([[1, 4, 9], [2, 3, 20], [5, 6, 7]])
    exact = straggler_prob_exact(m, G, 2.0)
    got = measure([m], B=3, G=G, taus=(2.0,), draws=20000, seed=1).p[2.0]
    assert 0 < exact < 1
    assert abs(got - exact) <= 4 * np.sqrt(exact * (1 - exact) / 20000)


def test_subsample_draws_without_replacement():
    m = np.arange(24).reshape(4, 6)
    s = subsample(np.random.default_rng(0), m, B=3, G=4, draws=50)
    assert s.shape == (50, 3, 4)
    for d in s:
        rows = {int(r[0]) // 6 for r in d}
        assert len(rows) == 3  # three different prompts
        for r in d:
            assert len(set(r.tolist())) == 4 and len({int(v) // 6 for v in r}) == 1


def synthetic(icc_fit: float, icc_held: float, fit_steps=20, held=150, B=8, G=4) -> GroupedTrace:
    """Per-sample trace: steps < fit_steps drawn with ``icc_fit``, later ones ``icc_held``,
    the same total log spread 0.6 and mean."""

    def model_at(t: int) -> LognormalLengths:
        icc = icc_fit if t < fit_steps else icc_held
        return LognormalLengths(5.0, 0.6 * np.sqrt(icc), 0.6 * np.sqrt(1 - icc), 4000)

    return lognormal_trace(model_at, fit_steps + held, B, G, np.random.default_rng(5), "synthetic")


CFG = ValidationConfig(fit_steps=20, taus=(3.0, 4.0), draws=20, reps=5, cap=4000)


def test_validation_passes_on_data_from_the_model():
    table = validate_groups(synthetic(0.3, 0.3), CFG)
    assert table.columns[: len(COLUMNS)] == list(COLUMNS)
    hier = table.filter(pl.col("model") == "hierarchical")
    assert hier.height == 2 * 4 and hier["n_steps"].unique().to_list() == [150]
    assert hier["abs_error"].max() <= 0.10
    assert hier["ratio_ks"].max() <= 0.15  # the whole max/median distribution agrees
    assert table.filter(pl.col("model") == "hierarchical_fitG2")["abs_error"].max() <= 0.10
    # the model with no within-group spread is wrong on these data
    assert table.filter(pl.col("model") == "no_within")["abs_error"].max() > 0.10


def test_validation_fails_on_data_with_another_icc():
    table = validate_groups(synthetic(0.05, 0.95), CFG)
    hier = table.filter(pl.col("model") == "hierarchical")
    assert hier["abs_error"].max() > 0.10 and hier["ratio_ks"].max() > 0.25


def test_fit_window_follows_a_run_whose_split_changed():
    """Steps 0-13 with ICC 0.95, steps 14 on with ICC 0.05: fitted on the last 6 of the 20
    fit steps the model predicts the held-out steps; fitted on all 20 it does not."""
    trace = synthetic(0.95, 0.05, fit_steps=14, held=156)
    cfg = ValidationConfig(fit_steps=20, taus=(3.0, 4.0), draws=20, reps=5, cap=4000, fit_G=0)
    full = validate_groups(trace, cfg).filter(pl.col("model") == "hierarchical")
    windowed = validate_groups(trace, replace(cfg, fit_window=6))
    assert set(windowed["model"]) == {"hierarchical_w6", "tb_stats_icc_w6", "no_within_w6"}
    win = windowed.filter(pl.col("model") == "hierarchical_w6")
    assert win["abs_error"].max() <= 0.10 < full["abs_error"].max()
    assert set(win["law"]) == {"normal"}


def test_fit_data_window_keeps_the_last_steps():
    trace = synthetic(0.3, 0.3, fit_steps=4, held=2, B=2, G=2)
    lengths, cens, at = fit_data(trace, 4, 2)
    assert at == [2, 2, 3, 3] and len(lengths) == len(cens) == 4
    assert fit_data(trace, 4, None)[2] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_no_fit_steps_without_a_held_out_run_is_one_line():
    trace = synthetic(0.3, 0.3, fit_steps=4, held=2, B=2, G=2)
    with pytest.raises(
        GroupedDataError, match=r"line \d+: --fit-steps: required without a held-out"
    ):
        validate_groups(trace, ValidationConfig(fit_steps=None, taus=(2.0,), draws=5, reps=2))
