"""Properties of the data-parallel imbalance factor (sim/models/dp_imbalance.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.models.dp_imbalance import (
    Imbalance,
    imbalance_factor,
    minibatch_loads,
    rank_loads,
)
from rolloutlab.sim.models.lengths import LognormalLengths

HEAVY = LognormalLengths(mu=7.0, sigma_prompt=1.0, sigma_within=0.8, max_response_length=28_000)
"""A heavy-tailed length model (median ~1,100 tokens, capped at 28K)."""


@settings(max_examples=20, deadline=None)
@given(
    ranks=st.sampled_from([2, 4, 8]),
    per_rank=st.integers(1, 16),
    G=st.sampled_from([1, 4, 16]),
    seed=st.integers(0, 1000),
    assignment=st.sampled_from(["contiguous", "balanced"]),
)
def test_factor_at_least_one(ranks, per_rank, G, seed, assignment):
    f = imbalance_factor(HEAVY, ranks * per_rank, ranks, G, 100, assignment, draws=16, seed=seed)
    assert f >= 1.0


@settings(max_examples=15, deadline=None)
@given(
    ranks=st.sampled_from([2, 4, 8]),
    per_rank=st.integers(1, 12),
    seed=st.integers(0, 1000),
)
def test_balancing_never_worse_per_draw(ranks, per_rank, seed):
    x = np.random.default_rng(seed).lognormal(7.0, 1.2, size=(8, ranks * per_rank))
    plain = rank_loads(x, ranks, "contiguous").max(axis=1)
    lpt = rank_loads(x, ranks, "balanced")
    assert np.all(lpt.max(axis=1) <= plain + 1e-9)
    assert np.allclose(lpt.sum(axis=1), x.sum(axis=1))  # every sequence placed once


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 1000), assignment=st.sampled_from(["contiguous", "balanced"]))
def test_one_rank_is_exactly_one(seed, assignment):
    assert imbalance_factor(HEAVY, 37, 1, 16, 100, assignment, seed=seed) == 1.0


@pytest.mark.parametrize("assignment", ["contiguous", "balanced"])
def test_factor_falls_towards_one_as_sequences_per_rank_grow(assignment):
    fs = [imbalance_factor(HEAVY, 8 * k, 8, 1, 0, assignment, draws=64) for k in (1, 8, 64, 512)]
    assert all(a >= b for a, b in zip(fs, fs[1:], strict=False))
    assert fs[-1] < 1.15 < 2.0 < fs[0]


def test_balanced_factor_below_contiguous_same_seed():
    plain = imbalance_factor(HEAVY, 256, 16, 16, 100, "contiguous", draws=32)
    lpt = imbalance_factor(HEAVY, 256, 16, 16, 100, "balanced", draws=32)
    assert lpt <= plain


def test_equal_lengths_are_balanced():
    x = np.full((3, 12), 500.0)
    assert np.allclose(rank_loads(x, 4, "contiguous"), 1500.0)
    assert np.allclose(rank_loads(x, 4, "balanced"), 1500.0)


def test_lpt_known_partition():
    # 6 items over 2 ranks, 3 each: LPT gives {9, 4, 3} vs {8, 5, 1}? longest first:
    # 9->r0, 8->r1, 5->r1 (13), 4->r0 (13), 3->r0 (16, r0 full), 1->r1 (14)
    loads = rank_loads(np.array([[1.0, 3, 4, 5, 8, 9]]), 2, "balanced")
    assert sorted(loads[0].tolist()) == [14.0, 16.0]


X8 = np.array([[1.0, 15, 9, 8, 10, 2, 6, 19]])
"""LPT over 2 parts, longest first: 19 (i7) -> p0, 15 (i1) -> p1, 10 (i4) -> p1 (25), 9 (i2)
-> p0 (28), 8 (i3) -> p1 (33), 6 (i6) -> p0 (34), 2 (i5) -> p1 (35, full), 1 (i0) -> p0 (35):
p0 = items 0, 2, 6, 7 = (1, 9, 6, 19), p1 = items 1, 3, 4, 5 = (15, 8, 10, 2)."""


def test_verl_cuts_balanced_partitions_into_unbalanced_minibatches():
    # two ranks, each cut in two: p0 -> (1 + 9, 6 + 19) = (10, 25), p1 -> (23, 12)
    loads = minibatch_loads(X8, 2, "verl", sp=1, mini_batches=2)
    assert loads.tolist() == [[[10.0, 23.0], [25.0, 12.0]]]
    # each mini-batch waits for its slowest rank: 23 + 25 = 48 against 70 / 2 = 35
    assert loads.max(axis=2).sum() == 48.0
    assert rank_loads(X8, 2, "balanced").tolist() == [[35.0, 35.0]]


def test_verl_sequence_parallel_group_gathers_its_partitions_in_order():
    # one rank of sp 2: partitions p0 (35) then p1 (35), cut in two = one partition each
    assert minibatch_loads(X8, 1, "verl", sp=2, mini_batches=2).tolist() == [[[35.0], [35.0]]]
    # cut in four: (1 + 9, 6 + 19, 15 + 8, 10 + 2)
    four = minibatch_loads(X8, 1, "verl", sp=2, mini_batches=4)
    assert four[0, :, 0].tolist() == [10.0, 25.0, 23.0, 12.0]


@settings(max_examples=15, deadline=None)
@given(
    ranks=st.sampled_from([2, 4]),
    sp=st.sampled_from([1, 2, 4]),
    cuts=st.sampled_from([1, 2, 4]),
    seed=st.integers(0, 1000),
)
def test_verl_places_every_sequence_once(ranks, sp, cuts, seed):
    x = np.random.default_rng(seed).lognormal(7.0, 1.2, size=(4, ranks * sp * cuts * 3))
    loads = minibatch_loads(x, ranks, "verl", sp=sp, mini_batches=cuts)
    assert loads.shape == (4, cuts, ranks)
    assert np.allclose(loads.sum(axis=(1, 2)), x.sum(axis=1))
    assert np.all(loads.max(axis=2).sum(axis=1) >= x.sum(axis=1) / ranks - 1e-6)


def test_verl_more_minibatches_than_sp_is_worse():
    # fully-async's call (4 mini-batches, sp 4) against colocated's (16 mini-batches, sp 4),
    # both 16 ranks of 64 GPUs: slices of partitions are less balanced than partitions
    kw = dict(prompt_tokens=200, assignment="verl", draws=16, sp=4)
    cut4 = imbalance_factor(HEAVY, 2048, 16, 16, mini_batches=4, **kw)
    cut16 = imbalance_factor(HEAVY, 8192, 16, 16, mini_batches=16, **kw)
    assert 1.0 <= cut4 < cut16
    via = Imbalance(8192, 16, "verl", sp=4, mini_batches=16).factor(HEAVY, 200, 64)
    assert via == pytest.approx(
        imbalance_factor(HEAVY, 8192, 16, 16, 200, "verl", sp=4, mini_batches=16)
    )


@pytest.mark.parametrize(
    "args",
    [(0, 2, 1, 0, "contiguous"), (4, 0, 1, 0, "contiguous"), (4, 2, 1, -1, "contiguous"),
     (4, 2, 1, 0, "random")],
)  # fmt: skip
def test_bad_input_raises(args):
    with pytest.raises(ValueError, match="dp imbalance"):
        imbalance_factor(HEAVY, *args)
