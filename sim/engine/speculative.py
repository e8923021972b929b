"""Speculative decoding on a worker: the drafter/verifier model, its acceptance process and
the cost of a verify step.

A verify step drafts ``k`` tokens per running sequence (``k`` drafter forwards) and checks
them in one ``k + 1``-token forward of the target model. Draft token ``j`` is accepted with
probability ``alpha`` given the ones before it were (Leviathan et al. 2023, "Fast Inference
from Transformers via Speculative Decoding", ICML, sec. 3.1 and 3.3), and the step emits the
accepted prefix plus one token of the target (the correction, or the bonus after ``k``
accepts), so the tokens ``T`` of one step have ``P(T >= t) = alpha^(t - 1)``,
``1 <= t <= k + 1``, and ``E[T] = (1 - alpha^(k+1)) / (1 - alpha)`` (their eq. 1).

Verify cost, from the worker's :class:`~sim.models.cost.LinearCost` (the roofline form
``a + b n + c ctx`` of :mod:`sim.models.roofline`): the weights and KV cache are read once
(``a``, ``c``), the per-sequence matmul work is done for ``k + 1`` tokens (``b (k + 1)``),
so a verify step costs ``a + b (k + 1) n + c ctx``; as ``n`` grows toward the compute-bound
regime the ``b`` term dominates and the gain over plain decoding shrinks. The drafter's
``k`` forwards each cost ``draft_cost`` times a target decode iteration (0 for n-gram /
prompt-lookup drafting). Not modelled: the attention FLOPs of the ``k`` extra query
positions (under 3 % of ``c`` for the shipped models on an H100: ``c`` is KV reading).

Acceptance drifts with the policy (the drafter was fitted to an older policy):
``alpha_t = alpha * exp(-(s_t * lr) / drift_scale)``, ``s_t`` the learner steps since the
drafter was last refreshed (every ``refresh_every`` steps; 0 = never); ``drift_scale``
(default infinite: constant ``alpha``) is the one number to fit to measured acceptance
(the drift law ``steps x learning rate`` follows docs/PAPERS.md sec. 2, ``||drift|| = O(T eta)``).
The scheduling with speculation is :mod:`sim.engine.speculative_lane`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from rolloutlab.sim.models.cost import LinearCost


@dataclass(frozen=True)
class SpeculativeDecoding:
    """Speculative decoding settings of every worker. Raises ValueError when out of range."""

    k: int
    """Draft length: tokens proposed per sequence per verify step (>= 1)."""
    alpha: float
    """Per-token acceptance probability right after a drafter refresh, in [0, 1)."""
    draft_cost: float = 0.0
    """Time of one drafter forward as a fraction of the target's decode iteration (0: n-gram
    lookup; about params_draft / params_target for a draft model)."""
    tail_below: int | None = None
    """Speculate only while a worker runs fewer than this many sequences (the tail of a
    synchronous step); None: every iteration. At most ``max_num_seqs``."""
    drift_scale: float = math.inf
    """Policy drift (learner steps x learning rate) that divides ``alpha`` by e."""
    refresh_every: int = 0
    """Learner steps between drafter refreshes (0: the drafter is never refreshed)."""
    lr: float = 0.0
    """Learning rate of the run (for the drift ``steps x lr``)."""
    seed: int = 0
    """Seed of the acceptance draws (per step and worker)."""

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or int(self.k) != self.k or self.k < 1:
            raise ValueError(
                f"speculative decoding: draft length k must be an integer >= 1, got {self.k}"
            )
        if not (0.0 <= self.alpha < 1.0):
            raise ValueError(
                f"speculative decoding: acceptance alpha must be in [0, 1), got {self.alpha}"
            )
        if not (self.draft_cost >= 0.0) or not math.isfinite(self.draft_cost):
            raise ValueError(
                f"speculative decoding: draft_cost must be finite and >= 0, got {self.draft_cost}"
            )
        if self.tail_below is not None and self.tail_below < 1:
            raise ValueError(
                f"speculative decoding: tail threshold must be >= 1, got {self.tail_below}"
            )
        if not (self.drift_scale > 0) or self.refresh_every < 0 or not (self.lr >= 0):
            raise ValueError(
                "speculative decoding: need drift_scale > 0, refresh_every >= 0, lr >= 0; got "
                f"{self.drift_scale}, {self.refresh_every}, {self.lr}"
            )

    def check_batch(self, max_num_seqs: int) -> None:
        """Raise ValueError when the tail threshold exceeds the running batch limit (it would
        speculate always, which ``tail_below=None`` says plainly)."""
        if self.tail_below is not None and self.tail_below > max_num_seqs:
            raise ValueError(
                f"speculative decoding: tail threshold {self.tail_below} is above the batch "
                f"(max_num_seqs {max_num_seqs})"
            )

    def alpha_at(self, step: int) -> float:
        """Acceptance at learner step ``step``: ``alpha exp(-(s lr) / drift_scale)`` with
        ``s = step mod refresh_every`` (``step`` when never refreshed)."""
        s = step % self.refresh_every if self.refresh_every else step
        return self.alpha * math.exp(-(s * self.lr) / self.drift_scale)

    def expected_tokens(self, step: int = 0) -> float:
        """``E[T] = (1 - alpha^(k+1)) / (1 - alpha)``: tokens per verify step (Leviathan et al.
        2023, eq. 1) at ``step``'s acceptance."""
        a = self.alpha_at(step)
        return (1.0 - a ** (self.k + 1)) / (1.0 - a)

    def verify_cost(self, cost: LinearCost) -> LinearCost:
        """The cost of one verify step (drafting included) as a :class:`LinearCost`:
        ``(a + b (k+1) n + c ctx) + k f (a + b n + c ctx)``, ``f = draft_cost`` (module doc)."""
        k, f = self.k, self.draft_cost
        return replace(
            cost,
            a_s=cost.a_s * (1.0 + k * f),
            b_s=cost.b_s * (k + 1 + k * f),
            c_s=cost.c_s * (1.0 + k * f),
        )

    def speedup(
        self, cost: LinearCost, running_seqs: float, context_tokens: float, step: int = 0
    ) -> float:
        """Predicted decode speed-up at a fixed batch: ``E[T] t_plain / t_verify`` (tokens per
        second with speculation over without), for ``running_seqs`` sequences holding
        ``context_tokens`` tokens; falls as ``running_seqs`` grows."""
        plain = cost.decode_iter_s(running_seqs, context_tokens)
        return (
            self.expected_tokens(step)
            * plain
            / self.verify_cost(cost).decode_iter_s(running_seqs, context_tokens)
        )


def step_tokens(rng: np.random.Generator, shape, k: int, alpha: float) -> np.ndarray:
    """Tokens emitted by verify steps, an int array of ``shape``: ``1 + min(A, k)`` with
    ``P(A >= j) = alpha^j`` (accepted drafts until the first rejection)."""
    if alpha == 0.0:
        return np.ones(shape, dtype=np.int64)
    return 1 + np.minimum(rng.geometric(1.0 - alpha, size=shape) - 1, k)


def verify_steps(
    rng: np.random.Generator, tokens: np.ndarray, k: int, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
    """Verify steps each sequence needs to emit ``tokens`` (n,) more tokens (>= 0), drawing
    each step's tokens (:func:`step_tokens`); the last step stops at the sequence's end.

    Returns ``(steps, drawn)``, (n,) int: steps, and tokens those steps emitted before the
    cut at the end (their mean per step estimates ``E[T]``, Wald's identity).
    """
    rem = np.asarray(tokens, dtype=np.int64).copy()
    steps = np.zeros(len(rem), dtype=np.int64)
    drawn = np.zeros(len(rem), dtype=np.int64)
    mean = (1.0 - alpha ** (k + 1)) / (1.0 - alpha)
    live = np.flatnonzero(rem > 0)
    while live.size:
        width = int(min(4096, math.ceil(rem[live].max() / mean * 1.25) + 8))
        cum = np.cumsum(step_tokens(rng, (live.size, width), k, alpha), axis=1)
        hit = cum >= rem[live, None]
        done = hit[:, -1]
        j = hit.argmax(axis=1)
        fin, go = live[done], live[~done]
        steps[fin] += j[done] + 1
        drawn[fin] += cum[done, j[done]]
        steps[go] += width
        drawn[go] += cum[~done, -1]
        rem[go] -= cum[~done, -1]
        live = go
    return steps, drawn


SPECULATIVE_SYNTAX = "K:ALPHA[:tail=N][:draft=F][:drift=D][:refresh=R]"
"""What :func:`parse_speculative` reads (``--speculative``)."""

_SPECULATIVE_KEYS = {
    "tail": "tail_below",
    "draft": "draft_cost",
    "drift": "drift_scale",
    "refresh": "refresh_every",
}


def parse_speculative(text: str, lr: float = 0.0, seed: int = 0) -> SpeculativeDecoding:
    """:class:`SpeculativeDecoding` from ``K:ALPHA[:tail=N][:draft=F][:drift=D][:refresh=R]``
    (e.g. ``4:0.7:tail=32``), with the run's ``lr`` and ``seed``. Raises ValueError naming
    the part that is wrong."""
    parts = text.strip().split(":")
    if len(parts) < 2:
        raise ValueError(f"--speculative {text!r}: expected {SPECULATIVE_SYNTAX}")
    try:
        kw: dict = {"k": int(parts[0]), "alpha": float(parts[1])}
        for part in parts[2:]:
            name, sep, value = part.partition("=")
            if not sep or name not in _SPECULATIVE_KEYS:
                raise ValueError(f"unknown part {part!r}")
            field = _SPECULATIVE_KEYS[name]
            kw[field] = int(value) if field in ("tail_below", "refresh_every") else float(value)
    except ValueError as exc:
        raise ValueError(f"--speculative {text!r}: {exc} (expected {SPECULATIVE_SYNTAX})") from None
    try:
        return SpeculativeDecoding(**kw, lr=lr, seed=seed)
    except ValueError as exc:
        raise ValueError(f"--speculative {text!r}: {exc}") from None
