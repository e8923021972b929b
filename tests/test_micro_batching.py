"""Token-budget micro-batches over hybrid-sharded FSDP (sim.models.micro_batching): the
micro-batch count, the per-micro-batch collectives and how they enter the learner cost."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.models.hardware import get_gpu, get_model
from rolloutlab.sim.models.learner_cost import (
    ADAM_BYTES_PER_PARAM,
    Layout,
    Network,
    learner_phases,
    ring_s,
)
from rolloutlab.sim.models.micro_batching import DynamicBatch
from rolloutlab.sim.scenario.placement import apply_split, parse_split
from rolloutlab.sim.scenario.scenario import load_scenario

M, H20 = get_model("qwen2.5-7b"), get_gpu("h20")
ACTOR = "timing_s/update_actor"
GPUS = st.sampled_from([8, 16, 32, 64, 128])


@settings(max_examples=60, deadline=None)
@given(
    tokens=st.floats(0, 1e9),
    gpus=GPUS,
    sp=st.sampled_from([1, 2, 4, 8]),
    budget=st.floats(1e3, 1e6),
)
def test_micro_batches_are_the_ceiling_of_tokens_over_the_ranks_budgets(tokens, gpus, sp, budget):
    b = DynamicBatch(budget, sp=sp)
    m = b.micro_batches(tokens, gpus)
    # ranks = gpus / sp, each packing up to sp x budget tokens: gpus x budget in all
    assert m == max(1, math.ceil(tokens / (gpus // sp) / (sp * budget)))
    assert m >= 1 and (m == 1 or (m - 1) * gpus * budget < tokens * (1 + 1e-12))
    assert b.micro_batches(2 * tokens, gpus) >= m  # more tokens, never fewer micro-batches
    assert b.micro_batches(tokens, 2 * gpus) <= m  # more GPUs, never more


@settings(max_examples=30, deadline=None)
@given(gpus=GPUS, tokens=st.floats(1e5, 5e7), updates=st.integers(1, 8))
def test_one_micro_batch_sharded_over_every_gpu_is_the_plain_fsdp_update(gpus, tokens, updates):
    # bf16 gradients, a budget no update fills, shard = trainer: the per-update FSDP terms
    plain = learner_phases(M, H20, Layout(gpus), tokens, updates=updates)
    b = DynamicBatch(1e12, reduce_bytes=2)
    same = learner_phases(M, H20, Layout(gpus), tokens, updates=updates, batching=b)
    assert same == pytest.approx(plain, rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(gpus=st.sampled_from([16, 32, 64, 128]), k=st.integers(1, 6), updates=st.integers(1, 4))
def test_each_extra_micro_batch_adds_one_round_of_collectives(gpus, k, updates):
    net = Network()
    b = DynamicBatch(61_440, sp=4, shard_gpus=8)
    # tokens giving exactly k micro-batches per update
    tokens = updates * (k - 0.5) * gpus * b.max_tokens_per_gpu
    assert b.micro_batches(tokens / updates, gpus) == k
    one = DynamicBatch(1e12, sp=4, shard_gpus=8)
    with_k = learner_phases(M, H20, Layout(gpus), tokens, net=net, updates=updates, batching=b)
    with_1 = learner_phases(M, H20, Layout(gpus), tokens, net=net, updates=updates, batching=one)
    # independent: within a node (NVLink) two weight all-gathers and an fp32 reduce-scatter
    # over 8 GPUs; across nodes an all-reduce of one eighth of the fp32 gradients
    w = M.weight_bytes()
    g32 = 2 * w
    within = 2 * ring_s("all_gather", w, 8, net.nvlink_bytes_per_s, net.alpha_s)
    within += ring_s("reduce_scatter", g32, 8, net.nvlink_bytes_per_s, net.alpha_s)
    across = ring_s("all_reduce", g32 / 8, gpus // 8, net.net_bytes_per_s, net.alpha_s)
    extra = updates * (k - 1) * (within + across)
    assert with_k[ACTOR] - with_1[ACTOR] == pytest.approx(extra, rel=1e-9)


@settings(max_examples=20, deadline=None)
@given(gpus=st.sampled_from([16, 32, 64, 128]))
def test_the_optimizer_step_stops_shrinking_at_the_shard_group(gpus):
    # at zero tokens only communication and the optimizer remain; HSDP over groups of 8
    # updates one eighth of the parameters on every GPU, whatever the GPU count
    b = DynamicBatch(61_440, sp=4, shard_gpus=8)
    zero = learner_phases(M, H20, Layout(gpus), 0.0, batching=b)[ACTOR]
    comm = b.micro_batch_comm_s(M, gpus, 450e9, 50e9, Network().alpha_s)
    assert zero - comm == pytest.approx(
        ADAM_BYTES_PER_PARAM * M.n_params() / (8 * H20.hbm_bytes_per_s)
    )


def test_a_split_with_batching_is_exact_at_the_tokens_given():
    sc = load_scenario("longcot")
    split = parse_split(64, "32:32", 4)
    b = DynamicBatch(61_440, sp=4, shard_gpus=8)
    T = 3.4e6
    placed = apply_split(sc, split, M, H20, phases=(ACTOR,), updates=4, batching=b, tokens_at=T)
    want = learner_phases(M, H20, Layout(32), T, updates=4, batching=b)[ACTOR]
    assert placed.cost.learner_step_s(T) == pytest.approx(want, rel=1e-9)
    with pytest.raises(ValueError, match="tokens_at"):
        apply_split(sc, split, M, H20, tokens_at=0.0)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"max_tokens_per_gpu": 0.0}, "positive finite"),
        ({"max_tokens_per_gpu": float("nan")}, "positive finite"),
        ({"max_tokens_per_gpu": 1e4, "sp": 0}, "sp >= 1"),
        ({"max_tokens_per_gpu": 1e4, "shard_gpus": -1}, "shard_gpus >= 0"),
    ],
)
def test_a_bad_dynamic_batch_is_refused(kwargs, words):
    with pytest.raises(ValueError, match=words):
        DynamicBatch(**kwargs)


def test_batching_that_does_not_fit_the_layout_is_refused():
    with pytest.raises(ValueError, match="does not divide"):
        DynamicBatch(1e4, shard_gpus=6).shard(16)
    with pytest.raises(ValueError, match="sp 3 does not divide"):
        DynamicBatch(1e4, sp=3).micro_batches(1e6, 16)
    with pytest.raises(ValueError, match="FSDP alone"):
        learner_phases(M, H20, Layout(16, tp=2), 1e6, batching=DynamicBatch(1e4))
