"""``async:S`` streaming: the rollout queue, verl's per-version budget, the staleness cap,
invariants (hypothesis) and bad specs."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.models.dynamics import step_lengths
from rolloutlab.sim.pipelines.async_stream import StreamSimulation
from rolloutlab.sim.pipelines.spec import PipelineConfig, parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig, run_sync
from rolloutlab.sim.trace.metrics import consumed, staleness
from rolloutlab.sim.trace.schema import validate

from tests.test_async_pipeline import tiny
from tests.test_weight_sync import fixed


def stream(sc, spec: str, B: int, G: int, steps: int, seed: int = 0, placement="separate"):
    """Run ``spec`` and return ``(rollouts, steps, ledger, simulation)``."""
    sim = StreamSimulation(
        sc, StaticG(G), RunConfig(steps, B, seed), parse_pipeline(spec, placement), None
    )
    r, s, led = sim.run()
    return r, s, led, sim


def test_groups_start_one_at_a_time_as_slots_free():
    """concurrency=1 on fixed 100-token groups (1.0 s each, learner 0.3 s, transfer
    0.1 s): one group at a time, back to back except where a sync pauses the engine."""
    r, _, _, _ = stream(fixed(100), "async:4:concurrency=1", B=2, G=2, steps=4)
    starts = np.unique(r["t_submit"].to_numpy())
    assert r.group_by("prompt_id").agg(pl.col("t_submit").n_unique())["t_submit"].max() == 1
    assert np.all(np.diff(starts) >= 1.0 - 1e-9)
    assert starts[:3] == pytest.approx([0.0, 1.0, 2.0])


def test_drop_oldest_drops_when_the_learner_is_slow_and_block_never_does():
    """A learner 20x slower than generation: the queue (capacity 4 groups) fills; with
    full=drop_oldest the oldest queued groups are dropped (verl's MessageQueue), with
    full=block the generator waits and nothing is dropped by the queue."""
    sc = fixed(10, learner=2.0)
    _, _, led_d, sim_d = stream(sc, "async:8:queue=4:concurrency=4", B=2, G=2, steps=5)
    _, _, led_b, sim_b = stream(sc, "async:8:queue=4:concurrency=4:full=block", B=2, G=2, steps=5)
    assert sim_d.queue_dropped > 0 and sim_d.queue_peak == 4
    assert sim_b.queue_dropped == 0 and led_b.dropped == 0 and sim_b.queue_peak <= 4
    assert led_d.dropped >= sim_d.queue_dropped


def test_threshold_bounds_the_groups_started_per_weight_version():
    """verl's staleness_threshold F: at most ceil((1 + F) * sync_every * B) groups start
    under one version; F = 0 with sync every step: B groups per version."""
    for spec, B, bound in (
        ("async:3:threshold=0", 2, 2),
        ("async:3:threshold=0.5:sync_every=2", 2, 6),
    ):
        r, _, _, _ = stream(tiny(), spec, B=B, G=2, steps=8)
        per_version = r.group_by("policy_version").agg(pl.col("prompt_id").n_unique())
        assert per_version["prompt_id"].max() <= bound


def test_sync_every_k_syncs_every_k_steps():
    _, s, _, _ = stream(tiny(), "async:2:sync_every=3", B=2, G=2, steps=7)
    synced = (s["sync_transfer_s"] > 0).to_list()
    assert synced == [False, False, True, False, False, True, False]


@settings(max_examples=25, deadline=None)
@given(
    st.integers(0, 3),
    st.sampled_from([None, 0.0, 0.5, 1.0]),
    st.sampled_from(["block", "drop_oldest"]),
    st.integers(0, 3),
    st.integers(1, 3),
    st.sampled_from(["inflight", "drain", "abort"]),
    st.sampled_from(["separate", "colocated"]),
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(0, 500),
)
def test_stream_invariants(S, threshold, full, extra_q, K, mode, placement, B, G, seed):
    """No consumed group staler than S (S = 0: none stale); the queue never above its
    capacity; every dispatched rollout consumed, dropped, aborted, buffered or in flight
    exactly once; valid traces with the sync columns."""
    assume(S >= K - 1)  # else refused (test_bad_specs_are_one_line_errors)
    pc = PipelineConfig(
        "async",
        S=S,
        threshold=threshold,
        full=full,
        queue=B + extra_q,
        sync_steps=K,
        sync_mode=mode,
        placement=placement,
    )
    sim = StreamSimulation(tiny(), StaticG(G), RunConfig(4, B, seed), pc, None)
    r, s, led = sim.run()
    validate(r, "rollouts")
    validate(s, "steps")
    used = consumed(r)
    assert ((staleness(used) >= 0) & (staleness(used) <= S)).all()
    assert used.height == led.consumed == 4 * B * G
    assert r.select("prompt_id", "sample_idx").is_unique().all()
    assert sim.queue_peak <= pc.queue_capacity(B)
    assert led.dispatched == led.consumed + led.dropped + led.aborted + led.ready + led.in_flight
    assert s["sync_transfer_s"].null_count() == 0
    for p, k, tokens in used.select("prompt_id", "sample_idx", "response_tokens").iter_rows():
        j = p // B  # whole rollouts, stitched from their segments
        want = step_lengths(tiny().lengths, seed, j, np.arange(j * B, (j + 1) * B), G)
        assert tokens == min(int(want[p - j * B, k]), 120)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("async:2:threshold=1.5", "threshold must be in [0, 1]"),
        ("async:2:threshold=-0.1", "threshold must be in [0, 1]"),
        ("async:2:full=wait", "full must be one of"),
        ("async:2:queue=0", "queue must be >= 1"),
        ("async:2:colour=red", "unknown option"),
        ("async:2:queue=4:queue=5", "given twice"),
        ("bounded:2:queue=4", "for async:S only"),
        ("async:0:sync_every=2", "below sync_every - 1"),
        ("partial:2:chunk=0", "chunk must be >= 1"),
        ("bounded:2:chunk=10", "partial:S only"),
        ("bounded:2:sync=fast", "sync mode must be one of"),
    ],
)
def test_bad_specs_are_one_line_errors(spec, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_pipeline(spec)


def test_queue_below_the_batch_is_refused():
    with pytest.raises(ValueError, match="queue capacity 3 is below the batch of B = 4"):
        parse_pipeline("async:1:queue=3").check_batch(4)
    parse_pipeline("async:1:queue=4").check_batch(4)


@pytest.mark.parametrize("workers", [1, 3])
def test_threshold_zero_is_the_synchronous_pipeline(workers):
    """verl's staleness_threshold = 0 with a sync every step: B groups start per version,
    all at once, and the next B only after the sync, which is the synchronous pipeline:
    the same step end times and no stale rollout."""
    sc = fixed(100, prompt=8, prefill=1e-3, workers=workers)
    cfg = RunConfig(5, 3, 0)
    _, s_sync = run_sync(sc, StaticG(2), cfg)
    r, s, _, _ = stream(sc, "async:1:threshold=0", B=3, G=2, steps=5)
    assert np.allclose(s["t_end"].to_numpy(), s_sync["t_end"].to_numpy())
    assert (staleness(consumed(r)) == 0).all()


def test_real_async_loop_refuses_simulator_only_options():
    from rolloutlab.real.rundir.async_config import AsyncConfig
    from rolloutlab.real.rundir.config import ConfigError

    AsyncConfig(pipeline="bounded:2")
    for spec in ("bounded:2:sync=drain", "partial:2:chunk=64"):
        with pytest.raises(ConfigError, match="simulator-only|runs"):
            AsyncConfig(pipeline=spec)
