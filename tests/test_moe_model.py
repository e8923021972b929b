"""Mixture-of-experts models: parameter counts against the model cards, the expected
experts a decode batch touches, the roofline's tangent of that read, and the learner's
FLOPs on active parameters."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rolloutlab.sim.models.hardware import MODELS, ModelConfig, get_gpu, get_model
from rolloutlab.sim.models.learner_cost import (
    Layout,
    LearnerEfficiency,
    Network,
    learner_phases,
    ring_s,
)
from rolloutlab.sim.models.roofline import roofline, roofline_cost


@pytest.mark.parametrize(
    "name, total, active, non_embedding, digit",
    [
        # Qwen3-235B-A22B model card: 235B in total, 22B activated, 234B non-embedding
        ("qwen3-235b-a22b", 235e9, 22e9, 234e9, 1e9),
        # Qwen3-30B-A3B model card: 30.5B in total, 3.3B activated, 29.9B non-embedding
        ("qwen3-30b-a3b", 30.5e9, 3.3e9, 29.9e9, 0.1e9),
    ],
)
def test_parameter_counts_match_the_model_cards(name, total, active, non_embedding, digit):
    m = get_model(name)
    # within half a unit of the card's last digit; the active count within one unit (the
    # 30B card's 3.3B is 3.35B cut, not rounded: its 30.5B and 29.9B do round)
    assert m.n_params() == pytest.approx(total, abs=digit / 2)
    assert active <= m.n_active_params() < active + digit
    embeddings = 2 * m.vocab_size * m.hidden_size  # untied input and output matrices
    assert m.n_params() - embeddings == pytest.approx(non_embedding, abs=digit / 2)


def test_qwen3_moe_head_dim_and_kv_bytes_by_hand():
    m = get_model("qwen3-235b-a22b")
    assert m.head_dim == 128  # config's head_dim, not 4096 / 64
    # 2 (K, V) x 94 layers x 4 KV heads x 128 dims x 2 bytes
    assert m.kv_bytes_per_token() == 192_512


def test_expected_experts_by_hand():
    m = get_model("qwen3-30b-a3b")  # 128 experts, 8 per token
    assert m.expected_experts(0) == 0
    assert m.expected_experts(1) == pytest.approx(8)
    # 128 (1 - (120/128)^2) = 128 x 0.12109375
    assert m.expected_experts(2) == pytest.approx(15.5)
    assert m.expected_experts(10_000) == pytest.approx(128)
    with pytest.raises(ValueError, match="tokens must be >= 0"):
        m.expected_experts(-1)


@given(st.integers(1, 4096), st.sampled_from(["qwen3-235b-a22b", "qwen3-30b-a3b"]))
def test_expected_experts_grow_and_stay_below_both_bounds(n, name):
    m = get_model(name)
    e = m.expected_experts(n)
    assert m.expected_experts(n - 1) <= e <= min(m.experts_per_token * n, m.n_experts) + 1e-9


def test_decode_read_of_one_token_by_hand():
    m = get_model("qwen3-30b-a3b")
    # one token skips 120 of 128 experts in each of 48 layers, 3 x 2048 x 768 weights each
    skipped = 48 * 120 * 3 * 2048 * 768 * 2
    assert m.decode_weight_bytes(1) == pytest.approx(m.weight_bytes() - skipped)


def test_dense_models_are_unchanged_by_the_expert_terms():
    for name, m in MODELS.items():
        if not m.is_moe:
            assert m.n_active_params() == m.n_params(), name
            assert m.decode_weight_bytes(64) == m.weight_bytes(), name
            assert m.expected_experts(64) == 0 and m.moe_layers == 0, name


def test_inconsistent_expert_config_is_refused():
    base = get_model("qwen3-30b-a3b")
    with pytest.raises(ValueError, match="n_experts >= experts_per_token"):
        dataclasses.replace(base, experts_per_token=200)
    with pytest.raises(ValueError, match="dense_layers"):
        dataclasses.replace(base, dense_layers=48)
    with pytest.raises(ValueError, match="mixture of experts"):
        ModelConfig("x", 64, 2, 2, 2, 128, 100, False, n_experts=4)


def test_shared_expert_and_dense_layers_counted_by_hand():
    # 2 layers (1 dense), h = 8, 2 heads of 4 (no GQA), vocab 10 tied, dense MLP I = 16,
    # 4 experts of I = 2, 1 per token, shared expert I = 3
    m = ModelConfig(
        "tiny", 8, 2, 2, 2, 16, 10, True,
        n_experts=4, experts_per_token=1, expert_intermediate_size=2,
        shared_expert_intermediate_size=3, dense_layers=1,
    )  # fmt: skip
    attn = 4 * 8 * 8
    dense = attn + 3 * 8 * 16 + 2 * 8
    moe = attn + 8 * 4 + 4 * 3 * 8 * 2 + 3 * 8 * 3 + 2 * 8
    assert m.n_params() == 10 * 8 + dense + moe + 8
    assert m.n_active_params() == m.n_params() - 3 * (3 * 8 * 2)


def test_roofline_reads_every_expert_by_default_and_uses_active_flops():
    r = roofline("qwen3-235b-a22b", "h100", tp=16, iter_overhead_s=0.0)
    cost = roofline_cost(r)
    assert cost.a_s == pytest.approx(r.model.weight_bytes() / (16 * 3.35e12))
    # 2 x 22B active FLOPs per sequence (card: 22B activated; half a unit of rounding)
    assert cost.b_s == pytest.approx(2 * 22e9 / (16 * 989e12), rel=0.5 / 22)


@given(st.integers(1, 512), st.sampled_from([8, 32, 64]))
def test_linearised_expert_read_is_exact_at_the_batch_and_above_elsewhere(n, n0):
    r = roofline("qwen3-235b-a22b", "h100", tp=16, decode_batch=n0)
    w, slope = r.decode_weight_line()
    m = r.model
    assert w + slope * n0 == pytest.approx(m.decode_weight_bytes(n0))
    assert w + slope * n >= m.decode_weight_bytes(n) * (1 - 1e-12)
    assert w + slope * n <= m.weight_bytes() + slope * n


def test_learner_flops_use_active_parameters():
    m, h100 = get_model("qwen3-235b-a22b"), get_gpu("h100")
    T = 1e6
    ph = learner_phases(m, h100, Layout(1), T, LearnerEfficiency(0.5, 0.25), ref=False)
    # one GPU: no collectives; 2 N T forward at 50 % of 989 TFLOP/s, N the card's 22B
    assert ph["timing_s/old_log_prob"] == pytest.approx(2 * 22e9 * T / (989e12 * 0.5), rel=0.03)


def test_expert_gradients_reduce_over_expert_replicas_by_hand():
    m, h100, net = get_model("qwen3-235b-a22b"), get_gpu("h100"), Network()
    lay = Layout(256, tp=2, pp=8, fsdp=False, ep=16)
    ph = learner_phases(m, h100, lay, 0.0, net=net, ref=False)
    experts = 94 * 128 * 3 * 4096 * 1536 * 2  # bytes of every routed expert
    rest = m.weight_bytes() - experts
    a = net.alpha_s
    grads = ring_s("all_reduce", rest / 16, 16, 50e9, a)  # tp x pp shards over dp = 16
    grads += ring_s("all_reduce", experts / 128, 2, 50e9, a)  # ep x pp shards over 2
    tp_latency = 2 * (94 / 8) * 2 * ring_s("all_reduce", 0.0, 2, 450e9, a)
    optimizer = 36 * m.n_params() / (256 * 3.35e12)
    assert ph["timing_s/update_actor"] == pytest.approx(tp_latency + grads + optimizer)
    with pytest.raises(ValueError, match="expert parallelism needs plain data parallelism"):
        Layout(256, tp=2, pp=8, ep=16)
