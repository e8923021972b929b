"""GRPO / DAPO objective pieces as pure functions of tensors (no model, no optimiser).

- Group-normalised advantages: ``A_ij = (r_ij - mean_j r_ij) / (std_j r_ij + eps)``
  (DeepSeekMath, Shao et al. 2024, eq. 4 with outcome rewards; ``std`` is the unbiased
  sample std, as verl's ``compute_grpo_outcome_advantage``).
- Clipped surrogate with the ratio against the behaviour log-probs
  ``rho = exp(logp - logp_behaviour)``: ``-min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A)``
  (PPO, Schulman et al. 2017; ``eps_high > eps_low`` is DAPO's clip-higher, Yu et al. 2025 eq. 10).
- Token-level aggregation: the per-token losses of all responses are summed and divided
  by the number of response tokens (DAPO eq. 12), not averaged per sequence first.
- KL to a reference with the ``k3`` estimator ``exp(q - p) - (q - p) - 1``,
  ``p = logp``, ``q = logp_ref`` (Schulman 2020, "Approximating KL divergence"; GRPO eq. 4).
- DAPO soft overlong punishment (eq. 13) and dynamic-sampling group filter (eq. 11).
- Mechanism switches (:func:`grpo_loss`): the PPO ratio clip on/off and the
  importance-sampling correction of the behaviour/learner gap ``off``, ``token`` or
  ``sequence`` (truncated at ``is_cap``: TIS, Yao et al. 2025 "Your efficient RL framework
  secretly brings you off-policy RL"; verl's ``rollout_is`` token/sequence levels).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from rolloutlab.real.rundir.config import IS_MODES


def group_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Advantages ``(B, G)`` from rewards ``(B, G)``, normalised within each group (row).

    A group of one has no spread: its advantages are 0. An all-equal group gives 0 too.
    """
    if rewards.ndim != 2:
        raise ValueError(
            f"group_advantages: rewards must be (B, G), got shape {tuple(rewards.shape)}"
        )
    if rewards.shape[1] < 2:
        return torch.zeros_like(rewards)
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True)  # unbiased, as verl
    return torch.where(std > 0, (rewards - mean) / (std + eps), torch.zeros_like(rewards))


def informative_groups(rewards: torch.Tensor) -> torch.Tensor:
    """Bool ``(B,)``: groups whose rewards are not all equal (DAPO dynamic sampling keeps these)."""
    return (rewards.max(dim=1).values - rewards.min(dim=1).values) > 0


def overlong_penalty(lengths: torch.Tensor, max_len: int, cache_len: int) -> torch.Tensor:
    """DAPO soft overlong punishment (eq. 13) for response lengths ``(N,)`` in tokens.

    0 up to ``max_len - cache_len``; then linear down to -1 at ``max_len``; -1 beyond.
    Raises: ValueError unless ``0 < cache_len <= max_len``.
    """
    if not (0 < cache_len <= max_len):
        raise ValueError(
            f"overlong_penalty: need 0 < cache_len <= max_len, got {cache_len}, {max_len}"
        )
    lengths = lengths.to(torch.float64)
    soft = ((max_len - cache_len) - lengths) / cache_len
    return torch.where(
        lengths <= max_len - cache_len,
        torch.zeros_like(lengths),
        torch.where(lengths <= max_len, soft, torch.full_like(lengths, -1.0)),
    )


@dataclass(frozen=True)
class LossParts:
    """The loss and what it is made of (all scalars, detached except ``loss``)."""

    loss: torch.Tensor
    """Token-mean of ``pg + kl_coef * k3`` (differentiable)."""
    pg_loss: float
    """Token-mean clipped-surrogate loss."""
    kl: float
    """Token-mean ``k3`` KL estimate to the reference (0 without one)."""
    clip_frac: float
    """Share of response tokens whose ratio was clipped (the min took the clipped side)."""
    n_tokens: int
    """Response tokens in the batch."""
    log_ratio_abs_mean: float = 0.0
    """Token-mean ``|logp - logp_behaviour|`` (0 on-policy; grows with staleness)."""
    ratio_max: float = 1.0
    """Largest token importance ratio ``exp(logp - logp_behaviour)`` in the batch."""
    probs_diff_mean: float = 0.0
    """Token-mean ``|exp(logp) - exp(logp_behaviour)|`` (:func:`rollout_probs_diff`)."""
    probs_diff_max: float = 0.0
    """Largest ``|exp(logp) - exp(logp_behaviour)|`` in the batch."""
    ppo_kl: float = 0.0
    """verl's ``actor/ppo_kl``: token-mean ``logp_behaviour - logp`` (k1 KL of the learner
    to the behaviour policy on the behaviour's samples)."""
    is_weight_mean: float = 1.0
    """Token-mean importance weight applied (1 with ``is_mode='off'``)."""


def merge_parts(parts: list[LossParts]) -> LossParts:
    """One :class:`LossParts` of micro-batches that together make one batch: token-means
    weighted by each part's ``n_tokens`` (``loss`` detached), maxima (``ratio_max``,
    ``probs_diff_max``) as the largest, ``n_tokens`` summed; one part is returned as is."""
    if len(parts) == 1:
        return parts[0]
    n = sum(p.n_tokens for p in parts)
    out: dict = {"n_tokens": n, "loss": sum(p.loss.detach() * p.n_tokens for p in parts) / n}
    for f in dataclasses.fields(LossParts):
        if f.name in out:
            continue
        vals = [getattr(p, f.name) for p in parts]
        out[f.name] = (
            max(vals)
            if f.name.endswith("_max")
            else sum(v * p.n_tokens for v, p in zip(vals, parts)) / n
        )
    return LossParts(**out)


def is_weights(log_ratio: torch.Tensor, mask: torch.Tensor, mode: str, cap: float) -> torch.Tensor:
    """Detached importance weights ``(N, T)`` of the behaviour/learner gap.

    ``log_ratio = logp - logp_behaviour`` ``(N, T)``, ``mask`` 1 on response tokens.
    ``off``: 1; ``token``: ``min(exp(log_ratio_t), cap)`` per token; ``sequence``:
    ``min(exp(sum_t log_ratio_t), cap)`` per sequence, broadcast over its tokens (truncated
    IS, Yao et al. 2025; verl ``rollout_is`` levels ``token`` / ``sequence``, mode
    ``truncate``). Raises ValueError on an unknown mode or ``cap <= 0``.
    """
    if mode not in IS_MODES or not cap > 0:
        raise ValueError(
            f"is_weights: mode must be one of {IS_MODES} and cap > 0, got {mode}, {cap}"
        )
    lr = log_ratio.detach() * mask
    if mode == "off":
        return torch.ones_like(lr)
    if mode == "token":
        return lr.exp().clamp(max=cap)
    seq = lr.sum(dim=1, keepdim=True).clamp(max=math.log(cap))
    return seq.exp().expand_as(lr)


def rollout_probs_diff(
    logp: torch.Tensor, logp_behaviour: torch.Tensor, mask: torch.Tensor
) -> tuple[float, float]:
    """``(mean, max)`` over response tokens of ``|exp(logp) - exp(logp_behaviour)|``: the
    gap between the learner's and the rollout engine's probability of each sampled token.

    verl's ``training/rollout_probs_diff_mean`` / ``_max`` (``verl/utils/debug/metrics.py``,
    ``calculate_debug_metrics``: absolute difference of the rollout's and the actor's
    token probabilities under the response mask). All three ``(N, T)``; ``mask`` 1 on
    response tokens. Returns ``(0.0, 0.0)`` for an empty mask.
    """
    keep = mask > 0
    if not bool(keep.any()):
        return 0.0, 0.0
    diff = (logp.detach().exp() - logp_behaviour.detach().exp()).abs()[keep]
    return float(diff.mean()), float(diff.max())


def grpo_loss(
    logp: torch.Tensor,
    logp_behaviour: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    logp_ref: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    clip: bool = True,
    is_mode: str = "token",
    is_cap: float = 2.0,
) -> LossParts:
    """Token-level clipped-surrogate GRPO loss (module docstring for the formulas).

    ``clip=True, is_mode='token'`` (the default) is PPO/DAPO's ``-min(rho A, clip(rho) A)``
    with ``rho = exp(logp - logp_behaviour)``. Any other setting takes the gradient
    ``-w A grad(logp)`` per token, ``w`` = :func:`is_weights` (``is_mode``, ``is_cap``),
    and with ``clip=True`` drops the tokens PPO's min would clip (``rho > 1 + eps_high``
    with ``A > 0``, ``rho < 1 - eps_low`` with ``A < 0``; PPO's gradient is zero there).
    ``clip=False, is_mode='token'`` is tinker's unclipped ``importance_sampling`` loss,
    truncated at ``is_cap``; ``is_mode='off'`` ignores the staleness entirely.

    Args:
        logp: current policy log-probs of the sampled tokens ``(N, T)``.
        logp_behaviour: the sampler's log-probs of the same tokens ``(N, T)``.
        advantages: one per sequence ``(N,)``, broadcast over its tokens.
        mask: 1 on response tokens, 0 on prompt and padding ``(N, T)``.
        logp_ref: reference log-probs ``(N, T)``, or None for no KL term.
    Raises: ValueError if the mask holds no token.
    """
    mask = mask.to(logp.dtype)
    n_tokens = int(mask.sum().item())
    if n_tokens == 0:
        raise ValueError("grpo_loss: the mask selects no response token")
    adv = advantages[:, None].to(logp.dtype)  # (N, 1)
    ratio = torch.exp(logp - logp_behaviour)  # (N, T)
    surr = ratio * adv
    surr_clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * adv
    w = is_weights(logp - logp_behaviour, mask, is_mode, is_cap)
    if clip and is_mode == "token":
        pg = -torch.minimum(surr, surr_clipped)  # (N, T)
    else:
        score = torch.exp(logp - logp.detach())  # value 1, gradient grad(logp)
        pg = -w * score * adv
        if clip:
            pg = torch.where(surr_clipped.detach() < surr.detach(), pg.detach() * 0, pg)
    per_token = pg
    kl = torch.zeros_like(pg)
    if logp_ref is not None:
        d = logp_ref - logp
        kl = torch.exp(d) - d - 1.0  # k3, >= 0
        per_token = pg + kl_coef * kl
    loss = (per_token * mask).sum() / n_tokens
    clipped = ((surr_clipped.detach() < surr.detach()).to(mask.dtype) * mask).sum() / n_tokens
    log_ratio = (logp - logp_behaviour).detach()  # (N, T)
    pd_mean, pd_max = rollout_probs_diff(logp, logp_behaviour, mask)
    return LossParts(
        loss=loss,
        pg_loss=float((pg.detach() * mask).sum() / n_tokens),
        kl=float((kl.detach() * mask).sum() / n_tokens),
        clip_frac=float(clipped),
        n_tokens=n_tokens,
        log_ratio_abs_mean=float((log_ratio.abs() * mask).sum() / n_tokens),
        ratio_max=float(
            torch.where(mask > 0, log_ratio, torch.full_like(log_ratio, -torch.inf)).max().exp()
        ),
        probs_diff_mean=pd_mean,
        probs_diff_max=pd_max,
        ppo_kl=float((-log_ratio * mask).sum() / n_tokens),
        is_weight_mean=float((w * mask).sum() / n_tokens),
    )
