"""Roofline cost and KV capacity from named configs; the public-figure checks on the
paged engine (one long sample bounds the step; busy front, near-empty tail)."""

from __future__ import annotations

import numpy as np
import pytest
from rolloutlab.sim.engine.core import EngineConfig, generate
from rolloutlab.sim.models.cost import ConstantCost, LinearCost
from rolloutlab.sim.models.hardware import GPUS, MODELS, get_model
from rolloutlab.sim.models.roofline import roofline, roofline_cost

from tests.reference.kv_loop import paged_reference


@pytest.mark.parametrize(
    "name, billions",
    [
        ("qwen2.5-3b", 3.09),
        ("llama-3.2-3b", 3.21),
        ("qwen2.5-7b", 7.62),
        ("llama-3-8b", 8.03),
        ("r1-distill-qwen-1.5b", 1.78),  # model card: 1.78B
    ],
)
def test_parameter_counts_match_model_cards(name, billions):
    assert get_model(name).n_params() / 1e9 == pytest.approx(billions, abs=0.01)


def test_kv_bytes_per_token_by_hand():
    # Qwen2.5-3B: 2 (K,V) * 36 layers * 2 KV heads * 128 dims * 2 bytes
    assert get_model("qwen2.5-3b").kv_bytes_per_token() == 36_864
    # DeepSeek-R1-Distill-Qwen-1.5B: 2 * 28 layers * 2 KV heads * 128 dims * 2 bytes
    assert get_model("r1-distill-qwen-1.5b").kv_bytes_per_token() == 28_672


def test_roofline_coefficients_by_hand():
    r = roofline("qwen2.5-7b", "h100", iter_overhead_s=0.0)
    cost = roofline_cost(r)
    m = r.model
    assert cost.a_s == pytest.approx(m.n_params() * 2 / 3.35e12)  # weights read once
    assert cost.c_s == pytest.approx(57_344 / 3.35e12 + 4 * 28 * 28 * 128 / 989e12)
    # memory-bound: one decode of one sequence is ~4.5 ms on an H100
    assert cost.decode_iter_s(1, 0) == pytest.approx(4.55e-3, rel=0.01)
    # KV capacity: 0.9 * 80 GB - 15.2 GB weights over 57,344 bytes/token, in 16-token blocks
    assert r.kv_blocks() == (72e9 - m.weight_bytes()) // 57_344 // 16


def test_fitted_coefficients_override_the_roofline():
    cost = roofline_cost(
        roofline("llama-3.2-3b", "a100"),
        override={"a_s": 0.02},
        base=LinearCost(0, 0, 0, sync_s=3.0),
    )
    assert cost.a_s == 0.02 and cost.sync_s == 3.0 and cost.c_s > 0


def test_more_memory_more_kv_blocks_and_tp_splits_weights():
    assert roofline("qwen2.5-3b", "h200").kv_blocks() > roofline("qwen2.5-3b", "h100").kv_blocks()
    tp2 = roofline_cost(roofline("qwen2.5-7b", "h20", tp=2))
    tp1 = roofline_cost(roofline("qwen2.5-7b", "h20"))
    assert tp2.c_s == pytest.approx(tp1.c_s / 2)
    with pytest.raises(ValueError, match="unknown model"):
        roofline("gpt-5", "h100")
    assert set(GPUS) == {"h100", "h200", "a100", "h20", "h800"} and len(MODELS) == 7


def test_one_long_sample_bounds_the_step_under_kv_pressure():
    # 4,096 tokens at ~11 tokens/s alone: ~372 s, whatever 63 short samples do, even with a
    # KV cache tight enough to preempt them
    lengths = np.array([[4096] + [300] * 63])
    cfg = EngineConfig(max_num_seqs=64, kv_blocks=400, block_size=16, max_num_batched_tokens=2048)
    batch = generate(lengths, np.array([200]), ConstantCost(iter_s=1 / 11), cfg)
    assert batch.preemptions.sum() > 0
    assert batch.t_finish.max() == pytest.approx(4096 / 11, rel=0.01)
    assert batch.t_finish.max() == pytest.approx(372.4, rel=0.01)


def test_one_long_sample_bounds_the_step_roofline():
    # a roofline worker: the step ends when the long sample has decoded alone
    cfg = roofline("qwen2.5-3b", "h100")
    cost = roofline_cost(cfg)
    lengths = np.array([[4096] + [64] * 255])
    batch = generate(
        lengths,
        np.array([128]),
        cost,
        EngineConfig(max_num_seqs=256, kv_blocks=cfg.kv_blocks(), max_num_batched_tokens=8192),
    )
    alone = sum(cost.decode_iter_s(1, 128 + g) for g in range(4096))
    assert alone < batch.t_finish.max() < alone * 1.03


def test_busy_front_near_empty_tail():
    # long-tailed lengths: occupancy falls to a handful for the last part of the step
    rng = np.random.default_rng(0)
    lengths = np.ceil(np.exp(rng.normal(6.0, 0.8, size=(32, 8)))).astype(int)
    cost = LinearCost(a_s=5e-3, b_s=5e-5, c_s=1e-8)
    run = paged_reference(
        lengths,
        np.full(32, 128),
        cost,
        EngineConfig(max_num_seqs=256, kv_blocks=10**6),
        record=True,
    )
    tl = run.timeline
    t_end = tl["t_start_s"] + tl["dt_s"]
    makespan = t_end[-1]
    front = tl["running"][:10]
    tail = tl["running"][t_end > 0.7 * makespan]
    assert front.min() == 256
    assert tail.max() <= 5  # a handful of sequences for the last 30% of the step
    assert tl["dt_s"][t_end > 0.7 * makespan].max() < 0.5 * tl["dt_s"][:10].min()
