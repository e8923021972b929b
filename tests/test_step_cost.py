"""The per-step cost of `compare learning` (analysis/learning/step_cost.py): a power law in the
step's rollouts when the fit runs hold two or more rollout counts."""

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rolloutlab.analysis.learning.step_cost import (
    busy_time,
    extrapolation_notes,
    pooled_cost,
    rollouts_per_step,
    step_clock,
)
from rolloutlab.calibration.readers.run_curve import RunCurve


def _run(G, B, T, busy, sync=0.01):
    curve = RunCurve(np.full(T, G), np.full(T, 1e-6), [np.zeros(B, int)] * T, False)
    span = busy + sync
    t_end = np.cumsum(np.full(T, span))
    steps = pl.DataFrame({"step": np.arange(T), "t_start": t_end - span, "t_end": t_end,
                          "gen_time": np.full(T, busy / 2), "train_time": np.full(T, busy / 2),
                          "sync_time": np.full(T, sync)})  # fmt: skip
    return steps, curve


def test_two_rollout_counts_recover_the_power_law():
    c1, p = 0.003, 1.12
    a = _run(4, 4, 20, c1 * 16**p)
    b = _run(16, 16, 20, c1 * 256**p)
    c0, c1_hat, p_hat = pooled_cost([a[0], b[0]], [a[1], b[1]])
    assert (c0, c1_hat, p_hat) == pytest.approx((0.01, c1, p), rel=1e-9)
    clock = step_clock(a[1], (c0, c1_hat, p_hat))
    assert clock == pytest.approx(a[0]["t_end"].to_numpy())  # reproduces the fit run's clock


def test_one_rollout_count_is_linear_through_zero():
    a = _run(8, 8, 10, 0.2)
    assert pooled_cost([a[0]], [a[1]]) == pytest.approx((0.01, 0.2 / 64, 1.0))


@given(
    c1=st.floats(1e-5, 1.0), p=st.floats(0.5, 2.0), x=st.integers(1, 4096), dx=st.integers(1, 4096)
)
def test_busy_time_rises_with_rollouts(c1, p, x, dx):
    assert 0 < busy_time((0.0, c1, p), x) < busy_time((0.0, c1, p), x + dx)


def test_the_power_law_goes_through_each_count_s_mean_not_its_geometric_mean():
    """Steps of one count that alternate 0.02 / 0.06 s cost 0.04 s on average: the clock
    sums them, so the fit must reproduce 0.04, not their geometric mean 0.035."""
    a = _run(4, 4, 20, 0.0)
    a = (a[0].with_columns(pl.Series("gen_time", np.tile([0.02, 0.06], 10))), a[1])
    b = _run(16, 16, 20, 0.9)
    _, c1, p = pooled_cost([a[0], b[0]], [a[1], b[1]])
    assert busy_time((0.0, c1, p), 16) == pytest.approx(0.04)
    assert busy_time((0.0, c1, p), 256) == pytest.approx(0.9)


def test_runs_beyond_the_fitted_rollouts_are_named_as_extrapolated():
    _, l16 = _run(4, 4, 3, 0.1)
    _, l64 = _run(16, 4, 3, 0.1)
    _, big = _run(16, 16, 3, 0.1)
    _, mid = _run(8, 8, 3, 0.1)
    assert rollouts_per_step(big).tolist() == [256] * 3
    cost = {"a": l16, "b": l64}
    assert extrapolation_notes(cost, {"mid": mid}) == []  # 64 rollouts: inside 16-64
    notes = extrapolation_notes(cost, {"mid": mid, "g16_b16": big})
    assert len(notes) == 2 and "16-64 rollouts" in notes[0] and "1 --real run(s)" in notes[0]
    assert "g16_b16: up to 256" in notes[1]
