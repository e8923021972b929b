"""``groupover:N/K``: N samples a prompt, the first K to finish kept, the rest aborted."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.engine.core import EngineConfig
from rolloutlab.sim.models.cost import LinearCost
from rolloutlab.sim.models.dynamics import step_lengths
from rolloutlab.sim.models.lengths import LognormalLengths
from rolloutlab.sim.pipelines.async_pipeline import run_pipeline
from rolloutlab.sim.pipelines.spec import parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.scenario import Scenario
from rolloutlab.sim.trace.metrics import consumed, drop_bias


def wide(slots: int = 4096, workers: int = 1) -> Scenario:
    """Constant 10 ms iterations: a request of L tokens takes L iterations."""
    return Scenario(
        name="wide",
        prompt_tokens=8,
        lengths=LognormalLengths(
            mu=4.0, sigma_prompt=0.5, sigma_within=0.8, max_response_length=600
        ),
        cost=LinearCost(a_s=0.01, b_s=0.0, c_s=0.0, learner_const_s=0.2, sync_s=0.05),
        engine=EngineConfig(n_workers=workers, max_num_seqs=slots),
    )


def test_keeping_the_k_shortest_of_n_when_all_run_at_once():
    """One worker with a slot for every request and a constant iteration time: a batch's
    requests all start together, so the first K of a group to finish are its K shortest.
    The length bias is then, on the very lengths drawn (numpy, no simulator): mean of
    the K shortest of each group over the mean of all N."""
    B, K, N, steps = 8, 4, 6, 6
    rollouts, steps_df, ledger = run_pipeline(
        wide(), StaticG(K), RunConfig(steps, B, 7), parse_pipeline(f"groupover:{N}/{K}")
    )
    drawn = np.stack(
        [step_lengths(wide().lengths, 7, j, j * B + np.arange(B), N) for j in range(steps)]
    )
    shortest = np.sort(drawn, axis=-1)[..., :K]
    expected = shortest.mean() / drawn.mean()
    assert drop_bias(rollouts)["len_consumed_over_generated"] == pytest.approx(expected, rel=1e-12)
    assert ledger.consumed == steps * B * K and ledger.aborted == steps * B * (N - K)
    assert (consumed(rollouts).group_by("step").len()["len"] == B * K).all()


@settings(max_examples=20, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(0, 3),
    st.integers(1, 4),
    st.integers(1, 5),
    st.sampled_from([2, 8, 64]),
    st.integers(0, 1000),
)
def test_first_k_kept_rest_aborted_exactly_once(K, extra, B, steps, slots, seed):
    N = K + extra
    rollouts, _, ledger = run_pipeline(
        wide(slots, workers=2),
        StaticG(K),
        RunConfig(steps, B, seed),
        parse_pipeline(f"groupover:{N}/{K}"),
    )
    assert rollouts.select("prompt_id", "sample_idx").is_unique().all()
    assert (rollouts["group_size"] == N).all()
    used = consumed(rollouts)
    assert used.height == ledger.consumed == steps * B * K
    cut = rollouts.filter(pl.col("finish_reason") == "abort")
    assert cut.height == ledger.aborted
    assert ledger.dispatched == (
        ledger.consumed + ledger.dropped + ledger.aborted + ledger.ready + ledger.in_flight
    )
    assert (cut["would_be_response_tokens"] >= cut["response_tokens"]).all()
    # kept = the first K to finish: none of a group's extras finished before its kept ones
    last_kept = used.group_by("prompt_id").agg(pl.col("t_finish").max().alias("kept_end"))
    first_cut = cut.group_by("prompt_id").agg(pl.col("t_finish").min().alias("cut_end"))
    both = last_kept.join(first_cut, on="prompt_id")
    assert (both["kept_end"] <= both["cut_end"]).all()
