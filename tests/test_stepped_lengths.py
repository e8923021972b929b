"""sim.models.stepped_lengths: the step-indexed empirical model draws only from its window's
groups, keeps common random numbers across G, and follows a drift that a pooled model
misses (compare groups --held-out)."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.calibration.validation.groups import ValidationConfig, validate_groups
from rolloutlab.sim.models.stepped_lengths import SteppedEmpiricalLengths
from rolloutlab.sim.scenario.scenario import CalibrationError, load_scenario

from tests.groups_helpers import drifting_trace


def labelled(n_steps: int, per_step: int, G: int, gaps: int = 1) -> SteppedEmpiricalLengths:
    """Groups whose lengths encode their step: step ``s`` (every ``gaps``-th step logged)
    has lengths ``1000 s + 1 .. 1000 s + G``."""
    steps = np.repeat(np.arange(n_steps) * gaps, per_step)
    groups = tuple(np.arange(1, G + 1) + 1000 * s for s in steps)
    return SteppedEmpiricalLengths(groups, steps, window=3, max_response_length=10**9)


@settings(max_examples=60, deadline=None)
@given(
    n_steps=st.integers(1, 12),
    per_step=st.integers(1, 4),
    G=st.integers(1, 5),
    window=st.integers(1, 15),
    gaps=st.integers(1, 3),
    step=st.integers(-5, 60),
    seed=st.integers(0, 2**31),
)
def test_draws_come_from_the_window_around_the_step(n_steps, per_step, G, window, gaps, step, seed):
    m = labelled(n_steps, per_step, G, gaps)
    m = SteppedEmpiricalLengths(m.groups, m.group_steps, window, m.max_response_length)
    logged = np.arange(n_steps) * gaps
    x = m.sample_ids(seed, step, np.arange(20), G)
    drawn = np.unique(x // 1000)
    w = min(window, n_steps)
    # the window: w consecutive logged steps, centred on step where the log allows
    lo = int(np.clip(np.searchsorted(logged, step - window // 2), 0, n_steps - w))
    allowed = logged[lo : lo + w]
    assert set(drawn.tolist()) <= set(allowed.tolist())
    if logged[0] <= step <= logged[-1] and window >= 2 * gaps + 1:
        assert allowed.min() <= step <= allowed.max()
    # without replacement: a prompt's G samples are G distinct entries of one group
    for row in x:
        assert len(set(row.tolist())) == G and len(set((row // 1000).tolist())) == 1


@settings(max_examples=40, deadline=None)
@given(step=st.integers(0, 30), seed=st.integers(0, 2**31), g=st.integers(1, 6))
def test_sample_j_is_the_same_whatever_g(step, seed, g):
    m = labelled(10, 3, 6)
    ids = np.arange(8)
    full = m.sample_ids(seed, step, ids, 6)
    assert np.array_equal(m.sample_ids(seed, step, ids, g), full[:, :g])
    assert np.array_equal(
        m.sample(np.random.default_rng(seed), 8, g, step),
        m.sample(np.random.default_rng(seed), 8, 6, step)[:, :g],
    )


def test_many_steps_in_one_call_equal_step_by_step():
    m = labelled(20, 2, 4)
    ids = np.arange(5)
    steps = np.arange(0, 40, 3)
    together = m.sample_ids(7, steps[:, None], np.broadcast_to(ids, (steps.size, 5)), 4)
    for i, s in enumerate(steps):
        assert np.array_equal(together[i], m.sample_ids(7, int(s), ids, 4))


def test_beyond_the_log_it_is_the_last_window_and_bad_input_is_refused():
    m = labelled(10, 2, 3)
    assert m.pool(500) == m.pool(9) == (14, 6)  # steps 7-9: groups 14..19
    assert m.pool(-50) == m.pool(0) == (0, 6)
    with pytest.raises(ValueError, match="exceeds the smallest"):
        m.sample_ids(0, 0, np.arange(3), 4)
    with pytest.raises(ValueError, match="one step per group"):
        SteppedEmpiricalLengths((np.array([1, 2]),), np.array([0, 1]), 3, 10)
    with pytest.raises(ValueError, match="window"):
        SteppedEmpiricalLengths((np.array([1, 2]),), np.array([0]), 0, 10)


def test_calibration_file_round_trip_and_bad_fields(tmp_path):
    base = {
        "format": "rolloutlab.calibration",
        "version": 1,
        "name": "s",
        "lengths": {
            "kind": "empirical",
            "values": [1, 2, 3, 4],
            "groups": [[1, 2], [3, 4]],
            "replace": False,
            "max_response_length": 10,
            "group_steps": [0, 5],
            "step_window": 1,
        },
        "prompt_tokens": 10,
        "cost": load_scenario("gsm8k").cost.to_dict(),
    }
    p = tmp_path / "c.json"
    p.write_text(json.dumps(base))
    lengths = load_scenario(str(p)).lengths
    assert isinstance(lengths, SteppedEmpiricalLengths)
    assert set(lengths.sample_ids(0, 0, np.arange(30), 2).ravel()) == {1, 2}
    assert set(lengths.sample_ids(0, 5, np.arange(30), 2).ravel()) == {3, 4}
    for field, value, msg in [
        ("group_steps", [0], "group_steps: 1 steps for 2 groups"),
        ("group_steps", ["a", 1], "lengths.group_steps"),
        ("step_window", 0, "step_window"),
    ]:
        bad = json.loads(json.dumps(base))
        bad["lengths"][field] = value
        p.write_text(json.dumps(bad))
        with pytest.raises(CalibrationError, match=msg) as err:
            load_scenario(str(p))
        assert str(p) in str(err.value)


def test_held_out_run_the_stepped_model_follows_the_drift_the_pooled_one_misses():
    """Two runs of one drifting process. On the other run's late steps the step-indexed
    model predicts P(max/median > tau) within 0.10; the pooled groups of all steps (the
    run average) do not."""
    cfg = ValidationConfig(
        fit_steps=None,
        taus=(3.0, 5.0),
        draws=20,
        reps=10,
        length_model="empirical",
        step_window=9,
        from_step=110,
        fit_G=0,
    )
    table = validate_groups(drifting_trace(1), cfg, drifting_trace(2))
    assert set(table["n_steps"]) == {50}
    err = dict(table.group_by("model").agg(pl.col("abs_error").max()).iter_rows())
    assert err["empirical_s9"] <= 0.10 and err["empirical"] > 0.20
