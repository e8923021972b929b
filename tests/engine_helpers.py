"""Hypothesis strategies and run configurations shared by the engine and pipeline tests."""

from __future__ import annotations

from hypothesis import strategies as st
from rolloutlab.sim.models.cost import LinearCost
from rolloutlab.sim.models.passrate import FixedPassRate
from rolloutlab.sim.models.rewards import RewardConfig
from rolloutlab.sim.pipelines.dynamic_sampling import DynamicSampling
from rolloutlab.sim.pipelines.sync import RunConfig


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


def ds_config(
    p: float, B: int, F: float, k: int, refill: str, steps: int = 6, seed: int = 0
) -> RunConfig:
    """A dynamic-sampling run: ``steps`` steps of ``B`` prompts, every prompt's pass rate
    fixed at ``p``, gen-batch factor ``F``, at most ``k`` rounds (0 = unlimited), ``refill``."""
    return RunConfig(
        steps=steps,
        prompts=B,
        seed=seed,
        rewards=RewardConfig(FixedPassRate(p)),
        dynamic=DynamicSampling(F, k, refill),
    )
