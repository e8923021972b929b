"""Unequal group sizes (a prompt sampled in several rounds, filtered samples, dynamic-
sampling regeneration) in ``compare groups`` and ``compare run-spread``: the
subsampling draws only from groups that hold G samples and never from a group's
padding; the logged G is the most common group size."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.calibration.readers.grouped import GroupedDataError, GroupedTrace
from rolloutlab.calibration.validation.groups import (
    ValidationConfig,
    measure,
    padded,
    subsample,
    validate_groups,
)
from rolloutlab.calibration.validation.run_spread import run_spread
from rolloutlab.sim.models.lengths import LognormalLengths

from tests.groups_helpers import lognormal_trace


def _drop_samples(trace: GroupedTrace, seed: int, share: float) -> GroupedTrace:
    """``trace`` with a ``share`` of its groups cut to a random smaller size (>= 1)."""
    rng = np.random.default_rng(seed)
    keys = trace.samples.select("step", "prompt").unique(maintain_order=True)
    G = trace.typical_group_size()
    cut = rng.random(keys.height) < share
    keep = keys.with_columns(pl.Series("keep_n", np.where(cut, rng.integers(1, G, keys.height), G)))
    df = trace.samples.join(keep, on=["step", "prompt"]).filter(
        pl.col("sample_idx") < pl.col("keep_n")
    )
    return GroupedTrace(df.drop("keep_n"), trace.length_unit)


def test_padded_step_by_hand():
    # group 0 has 2 samples, group 1 has 3. B = 2, G = 2: group 0 is [1, 2], group 1 any
    # two of {3, 9, 7}: ratios 9/2.5 = 3.6, 7/2.5 = 2.8, 9/4.5 = 2 -> 2 of 3 above 2.5.
    m = padded([np.array([1, 2]), np.array([3, 9, 7])])
    assert np.isnan(m[0, 2]) and m.shape == (2, 3)
    p = measure([m], B=2, G=2, taus=(2.5,), draws=30000, seed=0).p[2.5]
    assert abs(p - 2 / 3) <= 4 * np.sqrt(2 / 9 / 30000)
    # G = 3: only group 1 holds three samples -> 9 / 7, never above 1.3
    assert measure([m], B=1, G=3, taus=(1.3,), draws=50, seed=0).p[1.3] == 0.0
    with pytest.raises(ValueError, match="1 groups hold 3 samples, 2 needed"):
        subsample(np.random.default_rng(0), m, 2, 3, 5)


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 6), min_size=2, max_size=6),
    G=st.integers(1, 6),
    seed=st.integers(0, 2**16),
)
def test_subsample_never_draws_padding_or_a_small_group(sizes, G, seed):
    groups = [np.arange(1, n + 1) + 100 * i for i, n in enumerate(sizes)]
    m = padded(groups)
    ok = [i for i, n in enumerate(sizes) if n >= G]
    if not ok:
        return
    s = subsample(np.random.default_rng(seed), m, len(ok), G, draws=8)
    assert np.isfinite(s).all()
    for d in s:
        rows = sorted(int(r[0]) // 100 for r in d)
        assert rows == ok  # every group with >= G samples, each once
        for r in d:
            assert len(set(r.tolist())) == G and len({int(v) // 100 for v in r}) == 1


def test_equal_sizes_draw_the_same_numbers_as_before():
    """With no padding the draw is that of a plain (B, G) matrix (same random numbers)."""
    m = np.arange(1, 25, dtype=float).reshape(4, 6)
    a = subsample(np.random.default_rng(3), m, 3, 4, 10)
    rng = np.random.default_rng(3)
    rows = np.argsort(rng.random((10, 4)), axis=1)[:, :3]
    cols = np.argsort(rng.random((10, 3, 6)), axis=2)[:, :, :4]
    assert np.array_equal(a, m[rows[:, :, None], cols])


def _trace(seed: int) -> GroupedTrace:
    model = LognormalLengths(5.0, 0.4, 0.4, 4000)
    rng = np.random.default_rng(seed)
    return lognormal_trace(lambda t: model, 40, 12, 6, rng, f"run{seed}")


def test_validate_accepts_unequal_groups_and_still_predicts():
    """A third of the groups cut short at random: G goes to the most common size (6), B
    is the fewest full groups of a held-out step, and the models (fitted on the cut
    groups too) predict about as well as on the whole trace (20 held-out steps: the
    measurement's standard error is up to 0.08, so the comparison is with the whole)."""
    whole = _trace(1)
    trace = _drop_samples(whole, seed=2, share=0.3)
    assert trace.group_sizes() is not None and trace.typical_group_size() == 6
    cfg = ValidationConfig(fit_steps=20, taus=(2.0, 3.0), draws=20, reps=8, cap=4000, fit_G=0)
    table = validate_groups(trace, cfg)
    hier = table.filter(pl.col("model") == "hierarchical")
    assert sorted(hier["G"].unique()) == [1, 2, 3, 4, 5, 6]
    full = trace.samples.group_by("step", "prompt").len().filter(pl.col("len") == 6)
    fewest = full.filter(pl.col("step") >= 20).group_by("step").len()["len"].min()
    assert hier["B"].unique().to_list() == [fewest]
    ref = validate_groups(whole, cfg).filter(pl.col("model") == "hierarchical")
    assert hier["abs_error"].max() <= ref["abs_error"].max() + 0.05
    assert hier["abs_error"].mean() <= 0.06
    emp = validate_groups(trace, replace(cfg, length_model="empirical"))
    assert emp["abs_error"].mean() <= 0.06


def test_a_step_without_a_full_group_is_refused_naming_it():
    trace = _trace(1)
    df = trace.samples.filter((pl.col("step") != 30) | (pl.col("sample_idx") < 3))
    cut = GroupedTrace(df, "tokens")
    with pytest.raises(
        GroupedDataError, match=r"run1: line \d+: field 'step': step 30 has no group of 6"
    ):
        validate_groups(cut, ValidationConfig(fit_steps=20, taus=(2.0,), draws=5, reps=2))


def test_run_spread_accepts_unequal_groups():
    runs = [_drop_samples(_trace(s), seed=s, share=0.2) for s in (1, 2)]
    table = run_spread(runs, (2.0,), draws=10)
    assert sorted(table["G"].unique()) == [1, 2, 3, 4, 5, 6]
    assert table["dev_from_others"].max() <= 0.2
