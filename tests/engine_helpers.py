"""Hypothesis strategies shared by the engine tests."""

from __future__ import annotations

from hypothesis import strategies as st
from rolloutlab.sim.cost import LinearCost


def dyadic_costs(min_a: int = 0) -> st.SearchStrategy[LinearCost]:
    """Decode/prefill costs that are small dyadic fractions (``a_s`` in eighths from
    ``min_a / 8``, ``b_s`` sixteenths, ``c_s`` 64ths, prefill 32nds): every sum of them is
    exact in binary floating point, so engines that add in different orders agree exactly."""
    return st.builds(
        LinearCost,
        a_s=st.integers(min_a, 8).map(lambda k: k / 8),
        b_s=st.integers(0, 8).map(lambda k: k / 16),
        c_s=st.integers(0, 8).map(lambda k: k / 64),
        prefill_s_per_token=st.integers(0, 4).map(lambda k: k / 32),
    )
