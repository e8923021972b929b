"""Speculative decoding in the paged engine (:mod:`sim.engine.speculative_paged_lane`):
the paged engine as the never-speculating limit (preemptions included), Leviathan's
tokens per verify step, and the KV blocks a verify step reserves."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.engine.core import EngineConfig, generate
from rolloutlab.sim.engine.speculative import SpeculativeDecoding

from tests.test_speculative import COST, tokens_moments


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 150), min_size=4, max_size=40),
    mns=st.integers(1, 16),
    extra=st.integers(0, 60),
    bs=st.sampled_from([1, 4, 16]),
    caching=st.booleans(),
)
def test_never_speculating_is_the_paged_engine(lengths, mns, extra, bs, caching):
    """A tail threshold of 1 never fires: the lane is :class:`PagedWorker`, times (to float
    rounding: closed-form segments against iterations) and preemptions alike. Prefix
    caching only with every request admitted at once and no KV pressure (the lane frees
    a prompt's blocks with its last user; the paged worker keeps them cached: module doc)."""
    n = len(lengths) // 2 * 2
    L = np.asarray(lengths[:n]).reshape(-1, 2)
    P = np.arange(len(L)) * 5 + 3
    # (the lane refuses a request that cannot fit with its k = 3 drafts, even if it never
    # speculates: the check is made before the run)
    worst = max(-(-(int(p) + int(x) - 1 + 3) // bs) for p, row in zip(P, L) for x in row)
    kv = worst + extra if not caching else 10**6
    mns = max(mns, L.size) if caching else mns
    base = dict(max_num_seqs=mns, kv_blocks=kv, block_size=bs, prefix_caching=caching)
    plain = generate(L, P, COST, EngineConfig(**base))
    lane = generate(
        L,
        P,
        COST,
        EngineConfig(**base, speculative=SpeculativeDecoding(k=3, alpha=0.6, tail_below=1)),
    )
    np.testing.assert_allclose(lane.t_finish, plain.t_finish, rtol=1e-9)
    np.testing.assert_allclose(lane.t_first_token, plain.t_first_token, rtol=1e-9)
    assert (lane.preemptions == plain.preemptions).all()
    assert lane.spec_steps.sum() == 0


@settings(max_examples=20, deadline=None)
@given(
    k=st.integers(1, 6),
    alpha=st.floats(0.0, 0.95),
    seed=st.integers(0, 2**31),
    tail=st.sampled_from([None, 6]),
    draft=st.sampled_from([0.0, 0.1]),
)
def test_paged_engine_accepts_leviathan_tokens_per_verify_step(k, alpha, seed, tail, draft):
    """Under KV pressure (preemptions), tokens per verify step stay within 5 standard
    errors of (1 - a^(k+1)) / (1 - a) (sd from the exact step distribution); no more
    blocks are ever in use than the cache holds."""
    rng = np.random.default_rng(seed)
    L = rng.integers(20, 300, size=(6, 4))
    speculative = SpeculativeDecoding(
        k=k, alpha=alpha, tail_below=tail, draft_cost=draft, seed=seed
    )
    cfg = EngineConfig(max_num_seqs=16, kv_blocks=90, block_size=8, speculative=speculative)
    batch = generate(L, np.full(6, 40), COST, cfg)
    n = int(batch.spec_steps.sum())
    mean, var = tokens_moments(k, alpha)
    assert abs(batch.spec_drawn.sum() / n - mean) <= 5 * math.sqrt(var / n) + 1e-12
    assert np.isfinite(batch.t_finish).all()


def _two(k: int, draft: float, kv: int):
    """Two requests of prompt 1 + 10 tokens, block size 1, every draft rejected (T = 1):
    plainly each needs 10 blocks at most (P + L - 1)."""
    speculative = SpeculativeDecoding(k=k, alpha=0.0, draft_cost=draft)
    cfg = EngineConfig(
        max_num_seqs=2, kv_blocks=kv, block_size=1, prefix_caching=False, speculative=speculative
    )
    return generate(np.array([[10, 10]]), np.array([1]), COST, cfg)


def test_verify_steps_reserve_their_draft_slots_and_preempt():
    """Worked by hand: with k = 2 n-gram drafts a verifying sequence at g tokens holds
    1 + g + 2 blocks, up to 12 at g = 9; two need 24. 20 blocks (plain's exact fit) force
    a preemption, 24 do not; a draft model reserves k lookahead slots more (up to 14
    each: 28), so at 24 blocks it preempts and at 28 it does not."""
    assert _two(2, 0.0, 20).preemptions.sum() > 0
    assert _two(2, 0.0, 24).preemptions.sum() == 0
    assert _two(2, 0.1, 24).preemptions.sum() > 0
    assert _two(2, 0.1, 28).preemptions.sum() == 0
    plain = generate(
        np.array([[10, 10]]), np.array([1]), COST,
        EngineConfig(max_num_seqs=2, kv_blocks=20, block_size=1, prefix_caching=False),
    )  # fmt: skip
    assert plain.preemptions.sum() == 0


def test_a_request_that_cannot_fit_with_its_drafts_is_refused():
    with pytest.raises(ValueError, match="2 speculative slots need 12 KV blocks"):
        _two(2, 0.0, 11)
