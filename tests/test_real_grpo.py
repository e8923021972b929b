"""GRPO/DAPO objective pieces against hand-computed values."""

import math

import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.real.policy.grpo import (
    group_advantages,
    grpo_loss,
    informative_groups,
    overlong_penalty,
)


def test_advantages_are_normalised_with_the_unbiased_group_std():
    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]]), eps=0.0)
    a = 0.5 / math.sqrt(1 / 3)  # mean 0.5, unbiased std sqrt(1/3)
    assert torch.allclose(adv[0], torch.tensor([a, -a, -a, a]))
    assert torch.equal(adv[1], torch.zeros(4))


def test_a_group_of_one_has_zero_advantage():
    assert torch.equal(group_advantages(torch.tensor([[1.0], [0.0]])), torch.zeros(2, 1))


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.lists(st.floats(-5, 5), min_size=2, max_size=8).filter(lambda g: max(g) - min(g) > 1e-3),
        min_size=1,
        max_size=4,
    ).filter(lambda gs: len({len(g) for g in gs}) == 1)
)
def test_advantages_have_zero_mean_and_unit_std_within_each_group(groups):
    adv = group_advantages(torch.tensor(groups, dtype=torch.float64), eps=0.0)
    assert torch.allclose(adv.mean(1), torch.zeros(len(groups), dtype=torch.float64), atol=1e-9)
    assert torch.allclose(adv.std(1), torch.ones(len(groups), dtype=torch.float64), atol=1e-9)


def test_dynamic_sampling_keeps_only_groups_with_reward_spread():
    keep = informative_groups(torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]))
    assert keep.tolist() == [False, True, False]


def test_overlong_penalty_matches_dapo_eq13():
    pen = overlong_penalty(torch.tensor([10, 12, 14, 16, 17]), max_len=16, cache_len=4)
    assert pen.tolist() == [0.0, 0.0, -0.5, -1.0, -1.0]


def test_clipped_surrogate_and_token_level_mean_by_hand():
    # two sequences: 3 response tokens with A=+1, 1 response token with A=-1
    logp = torch.log(torch.tensor([[1.5, 1.0, 0.5], [2.0, 1.0, 1.0]]))
    old = torch.zeros(2, 3)  # ratios = exp(logp) = [[1.5,1,.5],[2,1,1]]
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    parts = grpo_loss(logp, old, torch.tensor([1.0, -1.0]), mask, eps_low=0.2, eps_high=0.3)
    # A=+1: -min(r, clip(r,.8,1.3)) = -[1.3, 1.0, 0.5];  A=-1, r=2: -min(-2, -1.3) = 2
    expected = (-1.3 - 1.0 - 0.5 + 2.0) / 4  # token mean over 4 tokens, not per-sequence mean
    assert parts.loss.item() == pytest.approx(expected)
    assert parts.clip_frac == pytest.approx(1 / 4)  # only the 1.5 ratio took the clipped side
    assert parts.n_tokens == 4 and parts.kl == 0.0


def test_kl_term_uses_k3_and_its_coefficient():
    logp = torch.log(torch.tensor([[0.5]]))
    ref = torch.log(torch.tensor([[0.25]]))  # d = ref - logp = -log 2
    parts = grpo_loss(
        logp, logp.clone(), torch.tensor([0.0]), torch.ones(1, 1), logp_ref=ref, kl_coef=0.1
    )
    k3 = 0.5 + math.log(2) - 1
    assert parts.kl == pytest.approx(k3)
    assert parts.loss.item() == pytest.approx(0.1 * k3)


def test_an_empty_mask_is_an_error():
    with pytest.raises(ValueError, match="no response token"):
        grpo_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1), torch.zeros(1, 2))
