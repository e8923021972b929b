"""Length dynamics: persistent prompt difficulty, group correlation, drift, ServeGen shape."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rolloutlab.sim.models.dynamics import (
    DRIFTS,
    GroupLengths,
    derive_math_table,
    fit_icc,
    math_group_lengths,
    prompt_ids_for,
    servegen_lengths,
    servegen_pmf,
)
from rolloutlab.sim.models.hashrng import hash_normal

SHARED = Path("/work/shared/data")


def test_hash_normals_are_standard_and_pure():
    z = hash_normal(7, 1, np.arange(200_000))
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    assert np.array_equal(z[:10], hash_normal(7, 1, np.arange(10)))
    assert not np.array_equal(z[:10], hash_normal(8, 1, np.arange(10)))


def test_a_long_prone_prompt_is_long_prone_when_it_recurs():
    m = GroupLengths(max_response_length=10**6, icc=0.8, mu=6.0, sigma=1.0)
    ids = prompt_ids_for(np.array([0, 10]), 50, dataset_size=500)  # epoch 0 and epoch 1
    assert np.array_equal(ids[0], ids[1])
    first, again = (
        np.log(m.sample_ids(0, s, ids[i], 8)).mean(axis=1) for i, s in enumerate((0, 10))
    )
    assert np.corrcoef(first, again)[0, 1] > 0.9  # same prompts, fresh samples
    other = np.log(m.sample_ids(0, 10, ids[1] + 1000, 8)).mean(axis=1)
    assert abs(np.corrcoef(first, other)[0, 1]) < 0.4


def test_icc_of_the_model_matches_its_parameter_and_the_data():
    assert fit_icc(math_group_lengths()) == pytest.approx(0.757, abs=0.001)
    m = GroupLengths(max_response_length=10**6, icc=0.6, sigma=0.9)
    assert fit_icc(m.sample_ids(1, 0, np.arange(4000), 8)) == pytest.approx(0.6, abs=0.03)


def test_same_first_samples_whatever_G():
    m = servegen_lengths()
    assert np.array_equal(
        m.sample_ids(0, 3, np.arange(9), 16)[:, :4], m.sample_ids(0, 3, np.arange(9), 4)
    )


def test_r1zero_drift_grows_mean_and_spread_flat_does_not():
    ids = np.arange(3000)
    flat, grow = servegen_lengths("flat"), servegen_lengths("r1zero")
    assert np.median(flat.sample_ids(0, 0, ids, 4)) == pytest.approx(
        np.median(flat.sample_ids(0, 5000, ids, 4)), rel=0.05
    )
    early, late = np.log(grow.sample_ids(0, 0, ids, 4)), np.log(grow.sample_ids(0, 4000, ids, 4))
    assert np.exp(np.median(late) - np.median(early)) == pytest.approx(1 + 9 * 4000 / 8000, rel=0.1)
    assert late.std() > 1.1 * early.std()
    assert set(DRIFTS) >= {"flat", "r1zero"}


def test_servegen_shape_is_bimodal_with_a_long_tail():
    L = servegen_lengths().sample_ids(0, 0, np.arange(5000), 4).ravel()
    assert 400 < np.median(L) < 900 and np.percentile(L, 99) > 10_000 and L.max() <= 32768
    hist, _ = np.histogram(np.log10(L), bins=np.linspace(2.8, 4.5, 9))
    assert hist[-2:].max() > hist[3:6].min()  # a second bump in the tail (bimodal)


@pytest.mark.skipif(not SHARED.exists(), reason="needs /work/shared/data")
def test_bundled_tables_are_derived_from_the_sources():
    rows = derive_math_table(SHARED / "qwen25_math_rm_maj_example/math_cot_100.jsonl")
    table = math_group_lengths()
    assert all(table[i, j] == c for i, _, j, c in rows)
    values, probs = servegen_pmf(SHARED / "servegen_deepseek_r1")
    assert probs.sum() == pytest.approx(1.0) and values.max() == 32768
