"""The GRPO learner: packs rollouts into tensors and takes the optimiser steps of one training step.

Per training step the rollouts kept (after DAPO dynamic sampling, if on) are split into
``minibatches`` shuffled chunks; each chunk is one AdamW step on the token-level loss
(:func:`real.policy.grpo.grpo_loss`) with gradient-norm clipping. With one chunk the step is
exactly on-policy (ratio 1 up to float error); more chunks reuse the rollouts, and the
later chunks see ratios away from 1, which is where clipping acts (verl's
``ppo_mini_batch_size``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from rolloutlab.real.policy.grpo import LossParts, grpo_loss, merge_parts
from rolloutlab.real.policy.model import LlamaLM
from rolloutlab.real.rundir.config import LearnerConfig
from rolloutlab.real.tasks.tokenizer import PAD_ID


@dataclass
class PackedBatch:
    """Rollouts as right-padded tensors; position ``j`` of the targets predicts token ``j + 1``."""

    ids: torch.Tensor
    """Prompt + response token ids ``(N, T)``, right-padded with PAD."""
    mask: torch.Tensor
    """``(N, T - 1)`` float: 1 where target ``j + 1`` is a response token."""
    logp_behaviour: torch.Tensor
    """``(N, T - 1)``: the sampler's log-prob of target ``j + 1`` (0 off the mask)."""
    advantages: torch.Tensor
    """``(N,)`` one advantage per rollout."""


def pad_prompt_response(
    prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``ids (N, T)`` of prompt + response and the target mask ``(N, T - 1)``
    (1 where target ``j + 1`` is a response token)."""
    t = max(len(p) + len(r) for p, r in zip(prompts, responses))
    ids = torch.full((len(prompts), t), PAD_ID, dtype=torch.long)
    mask = torch.zeros(len(prompts), t - 1)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, : len(p) + len(r)] = torch.tensor(list(p) + list(r))
        mask[i, len(p) - 1 : len(p) + len(r) - 1] = 1.0
    return ids, mask


def pack(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    logprobs: Sequence[Sequence[float]],
    advantages: torch.Tensor,
    tool_masks: Sequence[Sequence[bool]] | None = None,
) -> PackedBatch:
    """Build a :class:`PackedBatch` from ragged prompts, responses and behaviour log-probs.

    ``tool_masks`` (optional, one per response, of its length): True on tokens a tool
    wrote (multi-turn rollouts, :attr:`real.engines.interface.RolloutResult.tool_mask`);
    they stay in the context but are off the loss mask (not the policy's tokens).

    Raises: ValueError when a response and its log-probs differ in length, or a response is empty.
    """
    for i, (r, lp) in enumerate(zip(responses, logprobs)):
        if len(r) != len(lp) or not r:
            raise ValueError(
                f"pack: rollout {i} has {len(r)} response tokens and {len(lp)} log-probs"
            )
    ids, mask = pad_prompt_response(prompts, responses)
    old = torch.zeros_like(mask)
    for i, (p, lp) in enumerate(zip(prompts, logprobs)):
        old[i, len(p) - 1 : len(p) - 1 + len(lp)] = torch.tensor(lp)
    for i, (p, tm) in enumerate(zip(prompts, tool_masks or [])):
        if any(tm):
            mask[i, len(p) - 1 : len(p) - 1 + len(tm)] *= ~torch.tensor(list(tm), dtype=torch.bool)
    return PackedBatch(ids, mask, old, advantages.float())


def token_logprobs(model: LlamaLM, ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """Teacher-forced ``log softmax(logits / T)`` of each next token: ``(N, T - 1)``."""
    return token_logprobs_entropy(model, ids, temperature)[0]


def token_logprobs_entropy(
    model: LlamaLM, ids: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logp, entropy)``, both ``(N, T - 1)``: :func:`token_logprobs` and the detached
    entropy ``-sum_v p_v log p_v`` (nats) of each next-token distribution (verl's
    ``actor/entropy`` is its mean over response tokens)."""
    logits = model(ids)[:, :-1]  # (N, T-1, V)
    scale = temperature if temperature > 0 else 1.0
    logp_all = torch.log_softmax(logits.float() / scale, dim=-1)
    with torch.no_grad():
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp_all.gather(-1, ids[:, 1:, None]).squeeze(-1), entropy


def trainable_parameters(model: LlamaLM, last_layers: int = 0) -> list[torch.nn.Parameter]:
    """The parameters the learner trains, in ``model.parameters()`` order: all of them
    (``last_layers == 0``), or the last ``last_layers`` decoder layers and the final norm,
    every other parameter set ``requires_grad=False`` (autograd then keeps no activations
    of the frozen layers: only the trained ones and the output layer pay a backward pass).

    Raises: ValueError when ``last_layers`` exceeds the model's layers.
    """
    n = model.cfg.num_hidden_layers
    if last_layers == 0:
        model.requires_grad_(True)  # a copy of a frozen model trains too
        return list(model.parameters())
    if not 0 < last_layers <= n:
        raise ValueError(f"trainable_layers must be in 0..{n}, got {last_layers}")
    model.requires_grad_(False)
    trained = [model.model.layers[i] for i in range(n - last_layers, n)] + [model.model.norm]
    for module in trained:
        module.requires_grad_(True)
    return [p for p in model.parameters() if p.requires_grad]


@dataclass(frozen=True)
class UpdateStats:
    """What one training step reports (means over its minibatches)."""

    loss: float
    pg_loss: float
    kl: float
    clip_frac: float
    grad_norm: float
    """Global gradient norm before clipping (mean over minibatches)."""
    grad_cosine: float | None
    """Cosine between this step's parameter update and the previous step's (None on the first)."""
    n_tokens: int
    log_ratio_abs_mean: float = 0.0
    """Token-mean ``|log importance ratio|`` against the behaviour log-probs, on the first
    minibatch (before this step moved the weights: the behaviour/learner gap alone)."""
    ratio_max: float = 1.0
    """Largest token importance ratio of the first minibatch."""
    probs_diff_mean: float = 0.0
    """verl's ``training/rollout_probs_diff_mean`` on the first minibatch: token-mean
    ``|p_learner - p_rollout|`` of the sampled tokens before this step moved the weights
    (:func:`real.policy.grpo.rollout_probs_diff`); the engine/learner numerics gap."""
    probs_diff_max: float = 0.0
    """verl's ``training/rollout_probs_diff_max`` on the first minibatch."""
    entropy: float = 0.0
    """verl's ``actor/entropy``: token-mean policy entropy (nats) on the first minibatch."""
    ppo_kl: float = 0.0
    """verl's ``actor/ppo_kl`` on the first minibatch: k1 KL of the learner to the
    behaviour policy before this step moved the weights (staleness plus engine mismatch)."""
    is_weight_mean: float = 1.0
    """Token-mean importance weight of the first minibatch (:func:`real.policy.grpo.is_weights`)."""


class Learner:
    """Owns the trainable policy, its AdamW optimiser and (optionally) a frozen reference.

    Life cycle: :meth:`update` once per training step; :meth:`state_dict` /
    :meth:`load_state_dict` carry the optimiser and the previous update (for the
    gradient cosine) through checkpoints.
    """

    def __init__(self, model: LlamaLM, reference: LlamaLM | None, cfg: LearnerConfig):
        self.model, self.reference, self.cfg = model, reference, cfg
        if reference is not None:
            reference.eval().requires_grad_(False)
        self.params = trainable_parameters(model, cfg.trainable_layers)
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.prev_delta: torch.Tensor | None = None
        self._entropy: list[float] = []

    def _flat_params(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.params])

    def update(self, batch: PackedBatch, generator: torch.Generator) -> UpdateStats:
        """Take ``cfg.minibatches`` optimiser steps on ``batch`` (chunks drawn with ``generator``)."""
        self.model.train()
        before = self._flat_params()
        order = torch.randperm(batch.ids.shape[0], generator=generator)
        parts: list[LossParts] = []
        self._entropy = []
        norms: list[float] = []
        for chunk in order.chunk(min(self.cfg.minibatches, len(order))):
            parts.append(self._step(batch, chunk))
            norms.append(float(torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip)))
            self.optimizer.step()
        delta = self._flat_params() - before
        cosine = None
        if self.prev_delta is not None:
            denom = delta.norm() * self.prev_delta.norm()
            cosine = float(delta @ self.prev_delta / denom) if denom > 0 else 0.0
        self.prev_delta = delta
        w = torch.tensor([p.n_tokens for p in parts], dtype=torch.float64)

        def mean(xs: list[float]) -> float:
            return float((torch.tensor(xs, dtype=torch.float64) * w).sum() / w.sum())

        return UpdateStats(
            loss=mean([float(p.loss.detach()) for p in parts]),
            pg_loss=mean([p.pg_loss for p in parts]),
            kl=mean([p.kl for p in parts]),
            clip_frac=mean([p.clip_frac for p in parts]),
            grad_norm=float(sum(norms) / len(norms)),
            grad_cosine=cosine,
            n_tokens=int(w.sum()),
            log_ratio_abs_mean=parts[0].log_ratio_abs_mean,
            ratio_max=parts[0].ratio_max,
            probs_diff_mean=parts[0].probs_diff_mean,
            probs_diff_max=parts[0].probs_diff_max,
            entropy=self._entropy[0],
            ppo_kl=parts[0].ppo_kl,
            is_weight_mean=parts[0].is_weight_mean,
        )

    def _step(self, batch: PackedBatch, rows: torch.Tensor) -> LossParts:
        """One optimiser step's loss and gradients on ``rows``: in micro-batches of
        ``cfg.micro_batch_size`` rows (0: all at once), each backward scaled by its share of
        the response tokens, so the gradient is the token-mean loss's over all ``rows``
        (why: the logits of a large vocabulary, ``(rows, T, V)`` floats, do not fit in
        memory at once)."""
        total = int(batch.mask[rows].sum())
        size = self.cfg.micro_batch_size or len(rows)
        self.optimizer.zero_grad(set_to_none=True)
        parts, entropy_sum = [], 0.0
        for micro in rows.split(size):
            part, ent = self._micro_step(batch, micro, total)
            parts.append(part)
            entropy_sum += ent
        self._entropy.append(entropy_sum / total)
        return merge_parts(parts)

    def _micro_step(
        self, batch: PackedBatch, rows: torch.Tensor, total: int
    ) -> tuple[LossParts, float]:
        """Backward of ``rows``' token-mean loss times its share of ``total`` tokens;
        returns its :class:`LossParts` and its summed token entropy."""
        ids = batch.ids[rows]
        t = int(batch.mask[rows].sum(0).nonzero().max()) + 2  # trim shared right padding
        ids, mask, old = ids[:, :t], batch.mask[rows, : t - 1], batch.logp_behaviour[rows, : t - 1]
        ref = None
        if self.reference is not None and (self.cfg.kl_coef > 0 or self.cfg.track_ref_kl):
            with torch.no_grad():
                ref = token_logprobs(self.reference, ids, self.cfg.temperature)
        logp, entropy = token_logprobs_entropy(self.model, ids, self.cfg.temperature)
        parts = grpo_loss(
            logp,
            old,
            batch.advantages[rows],
            mask,
            self.cfg.eps_low,
            self.cfg.eps_high,
            ref,
            self.cfg.kl_coef,
            self.cfg.clip,
            self.cfg.is_mode,
            self.cfg.is_cap,
        )
        share = parts.n_tokens / total
        (parts.loss * share if share != 1 else parts.loss).backward()
        return parts, float((entropy * mask).sum())

    def state_dict(self) -> dict:
        """Optimiser state and previous update (tensors and plain values only)."""
        return {"optimizer": self.optimizer.state_dict(), "prev_delta": self.prev_delta}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output."""
        self.optimizer.load_state_dict(state["optimizer"])
        self.prev_delta = state["prev_delta"]
