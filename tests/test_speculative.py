"""Speculative decoding in the engine: the acceptance process against
Leviathan et al.'s expectation, the plain engine as the limit, SimPy = fast path, the
batch-size dependence of the gain, and bad settings."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.engine.core import EngineConfig, generate
from rolloutlab.sim.engine.fastpath import step_times
from rolloutlab.sim.engine.speculative import SpeculativeDecoding, verify_steps
from rolloutlab.sim.engine.speculative_lane import speculative_lane
from rolloutlab.sim.models.cost import LinearCost
from rolloutlab.sim.models.roofline import roofline, roofline_cost

COST = roofline_cost(roofline("qwen2.5-3b", "h100"))


def tokens_moments(k: int, alpha: float) -> tuple[float, float]:
    """Mean and variance of the tokens of one verify step, from the distribution written
    out independently of the code: P(T = t) = alpha^(t-1) (1 - alpha) for t <= k,
    P(T = k + 1) = alpha^k."""
    p = [alpha ** (t - 1) * (1 - alpha) for t in range(1, k + 1)] + [alpha**k]
    t = np.arange(1, k + 2)
    mean = float(np.dot(p, t))
    return mean, float(np.dot(p, t**2)) - mean**2


@settings(max_examples=25, deadline=None)
@given(
    k=st.integers(1, 8),
    alpha=st.floats(0.0, 0.95),
    seed=st.integers(0, 2**31),
    tail=st.sampled_from([None, 24]),
)
def test_engine_accepts_leviathan_tokens_per_verify_step(k, alpha, seed, tail):
    """Tokens per verify step the engine draws match (1 - a^(k+1)) / (1 - a) within 5
    standard errors (sd from the exact step distribution, n = verify steps drawn)."""
    rng = np.random.default_rng(seed)
    L = rng.integers(50, 600, size=(16, 4))
    speculative = SpeculativeDecoding(k=k, alpha=alpha, tail_below=tail, seed=seed)
    batch = generate(
        L, np.full(16, 100), COST, EngineConfig(max_num_seqs=64, speculative=speculative)
    )
    n = int(batch.spec_steps.sum())
    mean, var = tokens_moments(k, alpha)
    assert math.isclose(mean, speculative.expected_tokens(), rel_tol=1e-12)
    assert abs(batch.spec_drawn.sum() / n - mean) <= 5 * math.sqrt(var / n) + 1e-12
    # each sequence's steps cover its tokens, and only the last step is cut
    if tail is None:  # every sequence speculates after its first token
        over = batch.spec_drawn - (L.ravel() - 1)
        assert (over >= 0).all() and (over <= k).all()


def test_verify_steps_cut_at_the_end():
    """Steps emit at least the tokens asked and overshoot by at most k (the last step)."""
    rng = np.random.default_rng(1)
    need = rng.integers(0, 5000, size=300)
    steps, drawn = verify_steps(rng, need, 3, 0.8)
    assert (steps[need == 0] == 0).all()
    assert (drawn >= need).all() and (drawn - need <= 3).all()
    assert (steps >= np.ceil(need / 4)).all() and (steps <= need).all()


@settings(max_examples=20, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=2, max_size=60),
    mns=st.integers(1, 40),
    prefix=st.booleans(),
)
def test_never_speculating_is_the_plain_engine(lengths, mns, prefix):
    """A tail threshold of 1 never fires: the lane equals the SimPy slot engine (to float
    rounding; the closed forms are grouped differently)."""
    n = len(lengths) // 2 * 2
    L = np.asarray(lengths[:n]).reshape(-1, 2)
    P = np.arange(len(L)) * 7 + 3
    plain = generate(L, P, COST, EngineConfig(max_num_seqs=mns, prefix_caching=prefix))
    lane = speculative_lane(
        L.ravel(), np.repeat(P, 2), np.repeat(np.arange(len(L)), 2), COST, mns, prefix,
        SpeculativeDecoding(k=3, alpha=0.6, tail_below=1),
    )  # fmt: skip
    np.testing.assert_allclose(lane.t_finish, plain.t_finish, rtol=1e-12)
    np.testing.assert_allclose(lane.t_first, plain.t_first_token, rtol=1e-12)
    assert (lane.spec_steps == 0).all()


def test_zero_acceptance_free_verify_is_the_plain_engine():
    """alpha = 0 with a verify step priced like a decode step (b = 0, free drafter): one
    token per step, the plain engine's times."""
    cost = LinearCost(a_s=0.01, b_s=0.0, c_s=1e-6, prefill_s_per_token=1e-5)
    L = np.random.default_rng(2).integers(1, 400, size=(12, 4))
    P = np.full(12, 50)
    plain = generate(L, P, cost, EngineConfig(max_num_seqs=20))
    speculative = generate(
        L, P, cost, EngineConfig(max_num_seqs=20, speculative=SpeculativeDecoding(k=4, alpha=0.0))
    )
    np.testing.assert_allclose(speculative.t_finish, plain.t_finish, rtol=1e-12)


@pytest.mark.parametrize("tail", [None, 16])
def test_simpy_and_fast_path_agree(tail):
    """Same draws (per step and worker), same times, on several workers."""
    L = np.random.default_rng(3).integers(1, 2000, size=(24, 4))
    P = np.full(24, 80)
    cfg = EngineConfig(
        n_workers=3,
        max_num_seqs=20,
        speculative=SpeculativeDecoding(k=3, alpha=0.7, tail_below=tail),
    )
    batch = generate(L, P, COST, cfg)
    _, t_first, t_fin, _ = step_times(L, P, COST, cfg)
    np.testing.assert_allclose(t_fin, batch.t_finish, rtol=1e-12)
    np.testing.assert_allclose(t_first, batch.t_first_token, rtol=1e-12)
    assert (
        batch.t_finish.max()
        < generate(L, P, COST, EngineConfig(n_workers=3, max_num_seqs=20)).t_finish.max()
    )


@settings(max_examples=30, deadline=None)
@given(
    n1=st.integers(1, 512),
    dn=st.integers(1, 512),
    ctx=st.integers(0, 4000),
    k=st.integers(1, 8),
    alpha=st.floats(0.0, 0.95),
)
def test_gain_shrinks_as_the_batch_grows(n1, dn, ctx, k, alpha):
    """The verify step does k+1 tokens of matmul work per sequence: the predicted speed-up
    never rises with the running batch (same context per sequence)."""
    speculative = SpeculativeDecoding(k=k, alpha=alpha)
    n2 = n1 + dn
    assert speculative.speedup(COST, n2, n2 * ctx) <= speculative.speedup(COST, n1, n1 * ctx) * (
        1 + 1e-12
    )


def test_acceptance_drifts_with_steps_times_lr_and_resets_at_refresh():
    speculative = SpeculativeDecoding(k=4, alpha=0.8, drift_scale=1e-3, refresh_every=10, lr=1e-5)
    a = [speculative.alpha_at(t) for t in range(21)]
    assert a[0] == a[10] == a[20] == 0.8
    assert all(x > y for x, y in zip(a[:10], a[1:10]))
    assert math.isclose(a[5], 0.8 * math.exp(-5e-5 / 1e-3))
    assert SpeculativeDecoding(k=4, alpha=0.8).alpha_at(1000) == 0.8  # no drift by default


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(k=0, alpha=0.5), "k must be an integer >= 1"),
        (dict(k=2, alpha=1.0), "alpha must be in [0, 1)"),
        (dict(k=2, alpha=-0.1), "alpha must be in [0, 1)"),
        (dict(k=2, alpha=0.5, tail_below=0), "tail threshold"),
    ],
)
def test_bad_settings(kwargs, words):
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace(")", r"\)")):
        SpeculativeDecoding(**kwargs)


def test_engine_refuses_what_it_cannot_do():
    speculative = SpeculativeDecoding(k=2, alpha=0.5, tail_below=300)
    with pytest.raises(ValueError, match="above the batch"):
        EngineConfig(max_num_seqs=256, speculative=speculative)
    with pytest.raises(ValueError, match="not modelled with a token budget"):
        EngineConfig(
            kv_blocks=1000,
            max_num_batched_tokens=512,
            speculative=SpeculativeDecoding(k=2, alpha=0.5),
        )
    assert EngineConfig(
        kv_blocks=1000, speculative=SpeculativeDecoding(k=2, alpha=0.5)
    ).paged  # paged lane
    with pytest.raises(ValueError, match="not modelled"):
        EngineConfig(dispatch="shared", speculative=SpeculativeDecoding(k=2, alpha=0.5))


def test_drift_fit_recovers_the_law_from_engine_draws():
    """Verify steps drawn by the engine's sampler at known acceptance; the fit gets
    alpha0 and the drift scale back."""
    from rolloutlab.calibration.fits.speculative_drift import fit_acceptance_drift
    from rolloutlab.sim.engine.speculative import step_tokens

    rng = np.random.default_rng(5)
    k, alpha0, scale = 4, 0.8, 2e-3
    drift = np.linspace(0, 4e-3, 12)
    steps = np.full(12, 20_000)
    tokens = np.array(
        [step_tokens(rng, 20_000, k, alpha0 * math.exp(-x / scale)).sum() for x in drift]
    )
    fit = fit_acceptance_drift(drift, steps, tokens, k)
    assert fit.alpha0 == pytest.approx(alpha0, abs=0.01)
    assert fit.drift_scale == pytest.approx(scale, rel=0.1)
    with pytest.raises(ValueError, match="steps <= tokens"):
        fit_acceptance_drift(drift, steps, tokens * 0, k)
