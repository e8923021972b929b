"""``--park`` (RollPacker): over-sampled prompts cut unfinished come back as a long-tail batch."""

from __future__ import annotations

import dataclasses

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.engine.core import EngineConfig
from rolloutlab.sim.models.cost import LinearCost
from rolloutlab.sim.models.lengths import LognormalLengths
from rolloutlab.sim.pipelines.async_pipeline import run_pipeline
from rolloutlab.sim.pipelines.spec import parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.scenario import Scenario
from rolloutlab.sim.trace.metrics import consumed, staleness

SC = Scenario(
    name="hard-prompts",
    prompt_tokens=8,
    # a prompt's difficulty is keyed on its id: a long prompt stays long when re-run
    lengths=LognormalLengths(mu=4.0, sigma_prompt=1.0, sigma_within=0.3, max_response_length=2000),
    cost=LinearCost(a_s=0.01, b_s=0.0, c_s=0.0, learner_const_s=0.2, sync_s=0.05),
    engine=EngineConfig(n_workers=2, max_num_seqs=64),
)


def test_parking_trains_the_long_prompts_that_oversampling_cuts():
    """oversample:1.5 trains the 2/3 of prompts that finish first, so consumed responses
    are short; with --park the cut prompts are re-run and trained, raising the consumed
    mean length (and the wall clock: the long-tail batches are slow)."""
    cfg = RunConfig(40, 8, 0)
    plain, s0, _ = run_pipeline(SC, StaticG(4), cfg, parse_pipeline("oversample:1.5"))
    parked, s1, _ = run_pipeline(SC, StaticG(4), cfg, parse_pipeline("oversample:1.5", park=True))
    assert (
        consumed(parked)["response_tokens"].mean() > 1.5 * consumed(plain)["response_tokens"].mean()
    )
    assert s1["t_end"].max() > s0["t_end"].max()


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 4), st.integers(2, 12), st.integers(0, 1000), st.sampled_from([1.25, 2.0]))
def test_every_cut_prompt_is_rerun_or_waiting(B, steps, seed, ratio):
    sc = dataclasses.replace(SC, engine=EngineConfig(n_workers=2, max_num_seqs=6))
    rollouts, _, ledger = run_pipeline(
        sc, StaticG(3), RunConfig(steps, B, seed), parse_pipeline(f"oversample:{ratio}", park=True)
    )
    used = consumed(rollouts)
    assert used.height == steps * B * 3 == ledger.consumed
    assert (staleness(used) == 0).all()
    cut = rollouts.filter(pl.col("finish_reason") == "abort")
    cut_unfinished = cut.filter(pl.col("response_tokens") < pl.col("would_be_response_tokens"))
    rerun = set(used["prompt_id"].to_list())
    # every prompt cut while still generating is trained later, unless it is among the
    # last < B parked or re-running when the run ends
    missing = set(cut_unfinished["prompt_id"].to_list()) - rerun
    assert len(missing) <= 2 * B
    assert rollouts.select("step", "prompt_id", "sample_idx").is_unique().all()
