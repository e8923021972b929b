"""Length models: counter-based draws (blocks of steps == step by step, sample j of a
prompt independent of G, a prompt's difficulty kept when it recurs), and their shapes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.models.dynamics import GroupLengths, prompt_ids_for, step_lengths
from rolloutlab.sim.models.lengths import EmpiricalLengths, LognormalLengths

MODELS = {
    "lognormal": LognormalLengths(
        mu=5.0,
        sigma_prompt=0.6,
        sigma_within=0.5,
        max_response_length=3000,
        mu_growth_per_step=1e-3,
        sigma_growth_per_step=1e-3,
    ),
    "empirical": EmpiricalLengths(
        values=np.array([3, 40, 41, 900, 5000]), max_response_length=4096
    ),
    "empirical_groups": EmpiricalLengths(
        values=np.array([1]),
        max_response_length=4096,
        groups=(np.array([10, 12]), np.array([700]), np.array([90, 95, 99])),
    ),
    "group": GroupLengths(max_response_length=3000, icc=0.7, mu=5.0, sigma=0.8),
}


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(sorted(MODELS)),
    st.integers(0, 2**40),
    st.integers(1, 6),
    st.integers(1, 9),
    st.integers(1, 5),
    st.sampled_from([None, 7]),
)
def test_block_draws_equal_step_by_step_and_first_samples_whatever_G(
    name, seed, T, B, G, dataset_size
):
    model = MODELS[name]
    ts = np.arange(T) + 3
    ids = prompt_ids_for(ts, B, dataset_size)  # (T, B)
    block = model.sample_ids(seed, ts[:, None], ids, G + 2)  # (T, B, G + 2)
    assert block.shape == (T, B, G + 2) and block.dtype == np.int64
    assert block.min() >= 1 and block.max() <= model.max_response_length
    for i, t in enumerate(ts):
        one = step_lengths(model, seed, int(t), ids[i], G)
        assert np.array_equal(one, block[i, :, :G])


def test_lognormal_spread_and_group_correlation_match_parameters():
    m = LognormalLengths(mu=6.0, sigma_prompt=0.6, sigma_within=0.8, max_response_length=10**7)
    x = np.log(m.sample_ids(1, 0, np.arange(20_000), 2))
    assert x.mean() == pytest.approx(6.0, abs=0.03)
    assert x.std() == pytest.approx(1.0, abs=0.02)  # sqrt(0.6^2 + 0.8^2)
    assert np.corrcoef(x[:, 0], x[:, 1])[0, 1] == pytest.approx(0.36, abs=0.03)  # 0.6^2 / 1.0^2


def test_empirical_resamples_only_observed_lengths_uniformly():
    m = MODELS["empirical"]
    L = m.sample_ids(2, 0, np.arange(50_000), 1).ravel()
    vals, counts = np.unique(L, return_counts=True)
    assert vals.tolist() == [3, 40, 41, 900, 4096]  # 5000 clipped to the cap
    assert counts / L.size == pytest.approx(np.full(5, 0.2), abs=0.01)


def test_a_recurring_prompt_keeps_its_observed_group():
    m = MODELS["empirical_groups"]
    groups = [set(g.tolist()) for g in m.groups]
    first, later = m.sample_ids(4, 0, np.arange(300), 6), m.sample_ids(4, 50, np.arange(300), 6)
    for a, b in zip(first, later):
        home = [g for g in groups if set(a.tolist()) <= g]
        assert len(home) == 1 and set(b.tolist()) <= home[0]
    assert not np.array_equal(first, later)  # samples are redrawn, the group is not


def test_bad_inputs():
    with pytest.raises(ValueError, match="G >= 1"):
        MODELS["lognormal"].sample_ids(0, 0, np.arange(3), 0)
    with pytest.raises(ValueError, match="every observed group"):
        EmpiricalLengths(
            values=np.array([1]), max_response_length=9, groups=(np.array([], dtype=int),)
        )
