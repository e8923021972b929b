"""Weight-sync modes (inflight / drain / abort), the transfer-time model, chunked partial
rollouts: hand-computed timelines on fixed lengths and costs, and invariants."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.engine.core import EngineConfig
from rolloutlab.sim.models.cost import ConstantCost, LinearCost
from rolloutlab.sim.models.dynamics import step_lengths
from rolloutlab.sim.models.lengths import EmpiricalLengths
from rolloutlab.sim.pipelines.async_pipeline import run_pipeline
from rolloutlab.sim.pipelines.spec import PipelineConfig, parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig, run_sync
from rolloutlab.sim.pipelines.weight_sync import SyncParts
from rolloutlab.sim.scenario.scenario import Scenario, scenario_from_dict
from rolloutlab.sim.trace.metrics import consumed, learner_idle_fraction, staleness
from rolloutlab.sim.trace.schema import V3_COLUMNS, validate

from tests.conftest import calibration_dict
from tests.test_async_pipeline import tiny


def fixed(
    L: int, prompt: int = 0, prefill: float = 0.0, learner: float = 0.3, workers: int = 1
) -> Scenario:
    """Every response exactly ``L`` tokens; a decode iteration 0.01 s whatever the batch;
    learner step ``learner`` s; transfer 0.1 s; ``prefill`` s per prompt token prefilled."""
    return Scenario(
        name="fixed",
        prompt_tokens=prompt,
        lengths=EmpiricalLengths(values=np.array([L]), max_response_length=L),
        cost=ConstantCost(iter_s=0.01, learner_s=learner, sync_s=0.1, prefill_s_per_token=prefill),
        engine=EngineConfig(n_workers=workers, max_num_seqs=256),
    )


def test_transfer_time_is_constant_plus_per_tensor_plus_bytes_over_bandwidth():
    c = LinearCost(
        a_s=0.0,
        b_s=0.0,
        c_s=0.0,
        sync_s=0.5,
        sync_n_tensors=400,
        sync_s_per_tensor=0.05,
        weight_bytes=16e9,
        sync_s_per_byte=1e-10,
    )
    assert c.weight_sync_s() == pytest.approx(0.5 + 20.0 + 1.6)
    # the per-tensor fields default to 0: the former constant + bytes / bandwidth, exactly
    old = LinearCost(a_s=0, b_s=0, c_s=0, sync_s=1.3, weight_bytes=7e9, sync_s_per_byte=3e-11)
    assert old.weight_sync_s() == 1.3 + 7e9 * 3e-11
    with pytest.raises(ValueError):
        LinearCost(a_s=0, b_s=0, c_s=0, sync_s_per_tensor=-1.0)


def test_per_tensor_fields_load_from_a_scenario_file_and_time_the_sync():
    """A scenario's cost block takes the per-tensor fields: 339 tensors (a 7B model's
    28 layers x 12 + 3) at 50 ms each add 16.95 s to the sync's transfer part."""
    cost = {"a_s": 0.01, "b_s": 0.0, "c_s": 0.0, "learner_const_s": 0.3, "sync_s": 0.1}
    d = calibration_dict(cost={**cost, "sync_n_tensors": 339, "sync_s_per_tensor": 0.05})
    sc = scenario_from_dict(d)
    assert sc.cost.weight_sync_s() == pytest.approx(0.1 + 16.95)
    _, s, _ = run_pipeline(sc, StaticG(2), RunConfig(2, 2, 0), parse_pipeline("one-step-off"))
    assert np.allclose(s["sync_transfer_s"].to_numpy(), 17.05)


def test_sync_parts_total_is_their_sum():
    assert SyncParts(0.25, 2.0, 1.0).total_s == 3.25
    assert SyncParts(0.0, 0.0, 1.0).total_s == 1.0


@settings(max_examples=10, deadline=None)
@given(st.sampled_from(["inflight", "drain", "abort"]), st.integers(1, 4), st.integers(0, 500))
def test_every_mode_is_the_synchronous_pipeline_when_nothing_is_in_flight(mode, B, seed):
    """``sync``: generation has finished when the learner syncs, so the three modes give
    run_sync's traces exactly (drain and pause 0, transfer = sync_time)."""
    cfg = RunConfig(steps=3, prompts=B, seed=seed)
    r0, s0 = run_sync(tiny(), StaticG(4), cfg)
    r1, s1, _ = run_pipeline(tiny(), StaticG(4), cfg, PipelineConfig("sync", sync_mode=mode))
    # the asynchronous pipelines also fill the version-3 columns (null in run_sync's trace)
    r1 = r1.with_columns(pl.lit(None, dtype=pl.Int64).alias(c) for c in V3_COLUMNS["rollouts"])
    assert_frame_equal(r0, r1)
    assert_frame_equal(s0, s1)
    assert (s1["sync_drain_s"] == 0).all() and (s1["sync_pause_s"] == 0).all()
    assert (s1["sync_transfer_s"] == s1["sync_time"]).all()


def test_drain_waits_for_the_batch_in_flight_one_step_off_by_hand():
    """One-step-off, every batch 100 tokens = 1.0 s, training 0.3 s, transfer 0.1 s.
    Drain: batch t+1 starts when batch t ends, so at the sync (0.3 s after) it has 0.7 s
    left: drain 0.7 s, step time 0.7 + 0.3 + 0.1 = 1.1 s, learner idle 1 - 0.4/1.1.
    Inflight: the sync pauses batch t+1 for 0.1 s, step time 1.1 s as well but with no
    drain and the learner idle 1 - 0.4/1.1 too (it waits for generation instead)."""
    cfg = RunConfig(steps=6, prompts=2, seed=0)
    _, s, _ = run_pipeline(fixed(100), StaticG(2), cfg, parse_pipeline("one-step-off:sync=drain"))
    assert np.allclose(s["sync_drain_s"].to_numpy(), 0.7)
    assert np.allclose(s["sync_pause_s"].to_numpy(), 0.0)
    assert np.allclose(s["sync_transfer_s"].to_numpy(), 0.1)
    assert np.allclose(s["sync_time"].to_numpy(), 0.8)
    assert np.allclose(np.diff(s["t_end"].to_numpy()), 1.1)
    assert learner_idle_fraction(s, skip=1) == pytest.approx(1 - 0.4 / 1.1)
    _, s_in, _ = run_pipeline(fixed(100), StaticG(2), cfg, parse_pipeline("one-step-off"))
    assert (s_in["sync_drain_s"] == 0).all()
    assert np.allclose(s_in["sync_transfer_s"].to_numpy(), 0.1)


def test_drain_time_grows_with_the_longest_rollout_in_flight():
    cfg = RunConfig(steps=5, prompts=2, seed=0)
    pc = parse_pipeline("one-step-off:sync=drain")
    drains = [
        float(run_pipeline(fixed(L), StaticG(2), cfg, pc)[1]["sync_drain_s"][-1])
        for L in (100, 200, 400)
    ]
    assert drains == pytest.approx([0.7, 1.7, 3.7])


def test_abort_recomputes_prompt_and_prefix_when_it_resumes():
    """One-step-off, 2 prompts x 2 samples of 100 tokens, prompts of 50 tokens prefilled
    at 1e-3 s/token (once per prompt on first submission: prefix cache), training 0.305 s.
    The batch in flight started when the previous one ended: its first iteration (0.01 s
    + 0.1 s prefill) and 20 more have made 21 tokens by the boundary at 0.31 s where the
    sync stops it. Inflight: step time 1.1 s generation + 0.1 s transfer = 1.2 s.
    Abort: each of the 4 rollouts resumes as a request of 50 + 21 prompt tokens, each
    prefilled again (0.284 s), then 79 tokens (0.79 s): 0.31 + 0.1 + 0.284 + 0.79 =
    1.484 s, i.e. 4 * 71 * 1e-3 s more per step."""
    cfg = RunConfig(steps=6, prompts=2, seed=0)
    sc = fixed(100, prompt=50, prefill=1e-3, learner=0.305)
    r_in, s_in, _ = run_pipeline(sc, StaticG(2), cfg, parse_pipeline("one-step-off"))
    r_ab, s_ab, _ = run_pipeline(sc, StaticG(2), cfg, parse_pipeline("one-step-off:sync=abort"))
    step_in = np.diff(s_in["t_end"].to_numpy())[1:]
    step_ab = np.diff(s_ab["t_end"].to_numpy())[1:]
    assert np.allclose(step_in, 1.2)
    assert np.allclose(step_ab, 1.484)
    validate(r_ab, "rollouts")
    assert (consumed(r_ab)["response_tokens"] == 100).all()  # whole rollouts, not segments


def test_chunked_partial_rollouts_pause_at_the_chunk_and_resume_after_the_sync():
    """partial:1:chunk=40 on 100-token rollouts (B=2, G=2, 1.0 s a rollout): batches 0
    and 1 start at 0 and run 40 + 40 + 20 tokens, each pause ending when nothing else
    can run (the end of a rollout iteration). Batch 2 starts after the sync of step 0
    (1.4 s, version 1), is paused by the sync of step 1 at 1.7 s and reaches its chunk at
    1.9 s; it resumes once batch 3 has reached its own chunk and finishes under version
    2: its 4 rollouts span one version, none spans two. chunk >= 100 pauses nothing: the
    plain partial:1 trace, exactly."""
    cfg = RunConfig(steps=8, prompts=2, seed=0)
    r, s, led = run_pipeline(fixed(100), StaticG(2), cfg, parse_pipeline("partial:1:chunk=40"))
    validate(r, "rollouts")
    used = consumed(r)
    assert (used["response_tokens"] == 100).all()
    assert max(led.spanned_versions) == 1 and led.spanned_versions[8:12] == [1, 1, 1, 1]
    r_full, _, led_full = run_pipeline(
        fixed(100), StaticG(2), cfg, parse_pipeline("partial:1:chunk=100")
    )
    _, _, led_plain = run_pipeline(fixed(100), StaticG(2), cfg, parse_pipeline("partial:1"))
    assert led_full.spanned_versions == led_plain.spanned_versions
    assert_frame_equal(
        r_full, run_pipeline(fixed(100), StaticG(2), cfg, parse_pipeline("partial:1"))[0]
    )


@settings(max_examples=20, deadline=None)
@given(
    st.sampled_from(["one-step-off", "interval:2", "bounded:1", "partial:2", "oversample:1.5"]),
    st.sampled_from(["inflight", "drain", "abort"]),
    st.sampled_from(["separate", "colocated"]),
    st.sampled_from([None, 5, 30]),
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(0, 500),
)
def test_sync_modes_keep_the_pipeline_invariants(spec, mode, placement, chunk, B, G, seed):
    """Every mode: traces valid, consumed staleness in [0, S_max], every dispatched
    rollout consumed, dropped, aborted, buffered or in flight exactly once, B groups a
    step, whole rollouts consumed, and the step's sync parts add up to sync_time."""
    if chunk is not None and not spec.startswith("partial"):
        chunk = None
    pc = parse_pipeline(spec + (f":chunk={chunk}" if chunk else ""), placement, sync_mode=mode)
    cfg = RunConfig(steps=4, prompts=B, seed=seed)
    r, s, led = run_pipeline(tiny(), StaticG(G), cfg, pc)
    validate(r, "rollouts")
    validate(s, "steps")
    used = consumed(r)
    assert ((staleness(used) >= 0) & (staleness(used) <= pc.max_staleness)).all()
    assert used.height == led.consumed == 4 * B * G
    assert used.select("prompt_id", "sample_idx").is_unique().all()
    assert r.select("prompt_id", "sample_idx").is_unique().all()
    assert led.dispatched == led.consumed + led.dropped + led.aborted + led.ready + led.in_flight
    parts = s["sync_pause_s"] + s["sync_drain_s"] + s["sync_transfer_s"]
    assert np.allclose(parts.to_numpy(), s["sync_time"].to_numpy())
    n = int(np.ceil(pc.n_prompts_factor * B - 1e-9))  # prompts per batch
    # whole rollouts, however many segments they ran in (batches of n prompts: under
    # AReaL admission a streaming batch may be smaller, so the check is for the others)
    rows = used.select("prompt_id", "sample_idx", "response_tokens").iter_rows()
    for p, k, tokens in [] if pc.streaming else rows:
        j = p // n
        want = step_lengths(tiny().lengths, seed, j, np.arange(j * n, (j + 1) * n), G)
        assert tokens == min(int(want[p - j * n, k]), 120)
    if mode == "drain":  # nothing in flight crosses a sync (chunk-paused rollouts may)
        assert chunk is not None or max(led.spanned_versions, default=0) == 0
        assert (s["sync_pause_s"] == 0).all()  # the engine is idle once drained
