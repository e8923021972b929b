"""EmpiricalLengths(replace=False): whole observed groups resampled without replacement."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.models.lengths import EmpiricalLengths
from rolloutlab.sim.scenario.scenario import load_scenario, scenario_from_dict

GROUPS = (np.array([10, 20, 30, 40]), np.array([100, 200, 300, 400, 500]), np.array([7, 8, 9, 11]))


def model(cap=10**6):
    return EmpiricalLengths(np.concatenate(GROUPS), cap, groups=GROUPS, replace=False)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**40), step=st.integers(0, 50), G=st.integers(1, 4))
def test_each_prompt_draws_distinct_samples_of_one_group_and_prefixes_agree(seed, step, G):
    m = model()
    ids = np.arange(30)
    x = m.sample_ids(seed, step, ids, G)
    full = m.sample_ids(seed, step, ids, 4)
    assert (x == full[:, :G]).all()  # sample j is the same whatever G
    for row in full:
        group = next(g for g in GROUPS if set(row) <= set(g.tolist()))
        assert len(set(row.tolist())) == 4 and set(row) <= set(group.tolist())
    rows = model().sample(np.random.default_rng(seed), 20, G)
    assert all(len(set(r.tolist())) == G for r in rows)


def test_g_above_the_smallest_group_is_refused_and_cap_applies():
    with pytest.raises(ValueError, match="G=5 exceeds the smallest observed group"):
        model().sample_ids(0, 0, np.arange(3), 5)
    assert model(cap=25).sample_ids(0, 0, np.arange(50), 4).max() <= 25


def test_scenario_file_reads_replace_and_default_is_unchanged():
    base = load_scenario("gsm8k").source
    d = {
        **base,
        "lengths": {
            "kind": "empirical",
            "values": [1, 2, 3],
            "groups": [[1, 2], [3, 4]],
            "replace": False,
            "max_response_length": 10,
        },
    }
    assert scenario_from_dict(d).lengths.replace is False
    d["lengths"].pop("replace")
    assert scenario_from_dict(d).lengths.replace is True
