"""The timing kernel of sim/models/cost.py: closed forms against plain sums."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.engine_helpers import dyadic_costs


@settings(max_examples=100, deadline=None)
@given(
    dyadic_costs(), st.integers(0, 50), st.integers(0, 9), st.integers(0, 400), st.integers(0, 60)
)
def test_segment_is_the_sum_of_its_iterations(cost, m, n, ctx, k):
    # n sequences over ctx + n k tokens at the first iteration, one more token each per iteration
    plain = sum(cost.decode_iter_s(n, ctx + n * (k + j)) for j in range(m))
    assert cost.segment_s(m, n, ctx, k) == plain  # dyadic costs: exact
    first = cost.decode_iter_s(n, ctx + n * k)
    assert cost.segment_from_s(m, n, first) == plain


@settings(max_examples=30, deadline=None)
@given(
    dyadic_costs(),
    st.lists(
        st.tuples(st.integers(0, 9), st.integers(0, 400), st.integers(0, 99)),
        min_size=1,
        max_size=20,
    ),
)
def test_vectorised_kernel_equals_the_scalar_one(cost, rows):
    n, ctx, pre = (np.array(c) for c in zip(*rows))
    vec = cost.iteration_s(n, ctx, pre)
    assert vec.tolist() == [cost.iteration_s(*r) for r in rows]
    assert vec.tolist() == (np.stack([np.ones(len(n)), n, ctx, pre], 1) @ cost.coef()).tolist()
