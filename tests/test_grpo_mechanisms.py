"""The loss's mechanism switches (real.policy.grpo): PPO clip on/off and the
importance-sampling correction off / token / sequence, truncated at ``is_cap``."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.real.policy.grpo import grpo_loss, is_weights


def batch(log_ratio: list[list[float]], adv: list[float]):
    """Learner log-probs (leaf, requires grad) at -1 per token, behaviour = learner - log_ratio."""
    lr = torch.tensor(log_ratio, dtype=torch.float64)
    logp = torch.full_like(lr, -1.0, requires_grad=True)
    return logp, (logp.detach() - lr), torch.tensor(adv, dtype=torch.float64), torch.ones_like(lr)


def grad(**kw) -> torch.Tensor:
    logp, old, adv, mask = batch([[0.0, math.log(1.5)], [math.log(3.0), 0.0]], [1.0, -1.0])
    grpo_loss(logp, old, adv, mask, 0.2, 0.28, **kw).loss.backward()
    return logp.grad


def test_clip_off_token_is_truncated_importance_weighted_policy_gradient():
    # d loss / d logp_t = -min(rho_t, C) A / n_tokens (n = 4): rho = 1, 1.5, 3 -> cap 2, 1
    g = grad(clip=False, is_mode="token", is_cap=2.0)
    want = torch.tensor([[-1.0, -1.5], [2.0, 1.0]], dtype=torch.float64) / 4
    assert torch.allclose(g, want)


def test_clip_on_token_keeps_ppo_gradient():
    # PPO: rho 1.5 > 1.28 with A > 0 is clipped (zero gradient); rho 3 with A < 0 is not
    g = grad()
    want = torch.tensor([[-1.0, 0.0], [3.0, 1.0]], dtype=torch.float64) / 4
    assert torch.allclose(g, want)


def test_is_off_ignores_the_behaviour_policy():
    g = grad(clip=False, is_mode="off")
    want = torch.tensor([[-1.0, -1.0], [1.0, 1.0]], dtype=torch.float64) / 4
    assert torch.allclose(g, want)


def test_sequence_weights_are_the_truncated_product_of_token_ratios():
    g = grad(clip=False, is_mode="sequence", is_cap=2.0)
    # sequence 0: 1 * 1.5 = 1.5; sequence 1: 3 * 1 = 3 -> 2
    want = torch.tensor([[-1.5, -1.5], [2.0, 2.0]], dtype=torch.float64) / 4
    assert torch.allclose(g, want)


def test_clip_on_with_sequence_weights_drops_the_tokens_ppo_clips():
    g = grad(clip=True, is_mode="sequence", is_cap=2.0)
    want = torch.tensor([[-1.5, 0.0], [2.0, 2.0]], dtype=torch.float64) / 4
    assert torch.allclose(g, want)


def test_ppo_kl_is_the_k1_kl_to_the_behaviour_policy():
    logp, old, adv, mask = batch([[0.2, -0.4]], [1.0])
    parts = grpo_loss(logp, old, adv, mask)
    assert parts.ppo_kl == pytest.approx(0.1)  # mean(old - logp) = mean(-0.2, 0.4)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.floats(-5, 5), min_size=3, max_size=3), min_size=1, max_size=4),
    st.sampled_from(["off", "token", "sequence"]),
    st.floats(0.5, 10.0),
)
def test_is_weights_are_in_zero_to_cap_and_one_when_off(rows, mode, cap):
    w = is_weights(torch.tensor(rows, dtype=torch.float64), torch.ones(len(rows), 3), mode, cap)
    if mode == "off":
        assert bool((w == 1).all())
    else:
        assert bool((w >= 0).all()) and bool((w <= cap + 1e-9).all())
    if mode == "sequence":  # one weight per sequence
        assert bool((w == w[:, :1]).all())


@pytest.mark.parametrize(("mode", "cap"), [("tok", 2.0), ("token", 0.0), ("token", -1.0)])
def test_bad_is_settings_are_refused(mode, cap):
    with pytest.raises(ValueError, match="is_weights"):
        is_weights(torch.zeros(1, 2), torch.ones(1, 2), mode, cap)
