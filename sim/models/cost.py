"""Accelerator cost model: time of prefill, of a decode iteration, of a learner update
and of a weight sync.

Decode iteration on one worker (one continuous-batching engine replica):
``t_iter = a_s + b_s * running_seqs + c_s * context_tokens`` (s), with
``context_tokens`` the sum over running sequences of prompt + tokens generated so far.
In the memory-bound decode regime ``a_s`` is reading the weights, ``c_s`` reading the KV
cache per token and ``b_s`` the per-sequence work (sampling, logits). Prefill adds
``prefill_s_per_token`` per prompt token admitted in that iteration (prefix-cached
tokens excluded). Learner step: ``learner_const_s + learner_s_per_token * tokens``
(prompt + response tokens of the batch). Weight sync (transfer part):
``sync_s + sync_n_tensors * sync_s_per_tensor + weight_bytes * sync_s_per_byte`` (a
constant, a per-tensor latency and bytes / bandwidth; :mod:`sim.pipelines.weight_sync` adds the
pause and drain of the generators). Each
generation phase of a training step also pays ``gen_overhead_s`` once.

The engine (:mod:`sim.engine.core`) advances many decode iterations in closed form, which is
why the decode cost is linear in the batch state.

This module is the one timing kernel: :meth:`LinearCost.decode_iter_s` (one iteration),
:meth:`LinearCost.iteration_s` (with its prefill), :meth:`LinearCost.segment_s` (``m``
iterations of a fixed batch, closed form) and :meth:`LinearCost.coef` (the prices of a
schedule's features) take Python numbers or numpy arrays alike, and every engine, the
reference loops, the fast path and the calibration features call them (why one place:
the exact-equality tests between those paths need one order of float operations).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class LinearCost:
    """Linear cost model; every field in seconds (per unit where named)."""

    a_s: float
    """Fixed time of one decode iteration (weights read, launch overhead)."""
    b_s: float
    """Extra time per running sequence per iteration."""
    c_s: float
    """Extra time per context token (KV cache read) per iteration."""
    prefill_s_per_token: float = 0.0
    """Prefill time per newly admitted prompt token."""
    learner_const_s: float = 0.0
    """Fixed part of a learner step (optimizer step, log-prob passes' overhead)."""
    learner_s_per_token: float = 0.0
    """Learner time per token (prompt + response) of the training batch."""
    sync_s: float = 0.0
    """Constant part of pushing new weights to the generators (launch, barrier, reload)."""
    weight_bytes: float = 0.0
    """Bytes of weights copied per sync (e.g. 2 x parameters in bf16)."""
    sync_s_per_byte: float = 0.0
    """Inverse copy bandwidth, s per byte (1 / bytes-per-second of the learner-to-generator link)."""
    gen_overhead_s: float = 0.0
    """Fixed time of each generation phase outside the engine's iterations (request
    preparation, detokenisation, the trainer's generate-call bookkeeping)."""
    sync_n_tensors: float = 0.0
    """Tensors sent per weight sync, each paying :attr:`sync_s_per_tensor` (0 = one batched
    transfer, the cost of today's scenarios)."""
    sync_s_per_tensor: float = 0.0
    """Latency of sending one tensor (an RPC or collective launch per parameter). Public
    reports (FIELD.md; issue threads of verl/slime users) show per-parameter transfers of a
    7B-30B model taking tens of seconds where one bucketed transfer takes under one."""

    def __post_init__(self) -> None:
        bad = {k: v for k, v in asdict(self).items() if not (v >= 0)}
        if bad:
            raise ValueError(f"LinearCost: coefficients must be non-negative and finite, got {bad}")

    def decode_iter_s(self, running_seqs, context_tokens):
        """Time (s) of one decode iteration: ``a_s + b_s n + c_s ctx``.

        ``running_seqs`` ``n`` and ``context_tokens`` ``ctx`` are numbers or broadcastable
        arrays (then an array of times)."""
        return self.a_s + self.b_s * running_seqs + self.c_s * context_tokens

    def iteration_s(self, running_seqs, context_tokens, prefill_tokens):
        """Time (s) of one iteration that also prefills ``prefill_tokens`` new prompt
        tokens: ``a_s + b_s n + c_s ctx + prefill_s_per_token * prefill`` (numbers or
        broadcastable arrays)."""
        return self.decode_iter_s(running_seqs, context_tokens) + self.prefill_s(prefill_tokens)

    def segment_s(self, m, running_seqs, context_tokens, k=0):
        """Time (s) of ``m`` consecutive decode iterations of a fixed batch, closed form.

        The ``n = running_seqs`` sequences hold ``context_tokens + n k`` tokens at the
        first iteration and each adds one token per iteration, so
        ``sum_{j<m} a + b n + c (ctx + n (k + j)) = m (a + b n + c ctx) + c n (m k + m (m - 1) / 2)``.
        (``k`` lets a caller keep ``ctx`` free of the iteration counter, as
        :class:`sim.engine.slot_worker.Worker` does.) Numbers or broadcastable arrays; ``m >= 0``.
        """
        first = self.decode_iter_s(running_seqs, context_tokens)
        return self.segment_from_s(m, running_seqs, first, k)

    def segment_from_s(self, m, running_seqs, first_iter_s, k=0):
        """:meth:`segment_s` given its first iteration's time ``first_iter_s`` (s), already
        computed as ``decode_iter_s(n, ctx)``: ``m first + c_s n (m k + m (m - 1) / 2)``."""
        return m * first_iter_s + self.c_s * running_seqs * (m * k + m * (m - 1) / 2.0)

    def coef(self) -> np.ndarray:
        """``(4,)`` ``[a_s, b_s, c_s, prefill_s_per_token]``: a worker's busy time is
        ``features @ coef()`` for schedule features ``[iterations, sum of running
        sequences, sum of context tokens, prefill tokens]`` (:mod:`sim.engine.features`)."""
        return np.array([self.a_s, self.b_s, self.c_s, self.prefill_s_per_token])

    def prefill_s(self, prompt_tokens):
        """Extra time (s) of an iteration that prefills ``prompt_tokens`` new tokens."""
        return self.prefill_s_per_token * prompt_tokens

    def learner_step_s(self, tokens: float) -> float:
        """Time (s) of one learner update on a batch of ``tokens`` tokens."""
        return self.learner_const_s + self.learner_s_per_token * tokens

    def weight_sync_s(self) -> float:
        """Transfer time (s) of one weight sync:
        ``sync_s + sync_n_tensors * sync_s_per_tensor + weight_bytes * sync_s_per_byte``
        (constant + per-tensor latency + bytes / bandwidth; with the per-tensor fields at
        their default 0 this is ``sync_s + weight_bytes * sync_s_per_byte`` bit for bit)."""
        return (
            self.sync_s
            + self.sync_n_tensors * self.sync_s_per_tensor
            + self.weight_bytes * self.sync_s_per_byte
        )

    def to_dict(self) -> dict[str, float]:
        """The coefficients as a JSON-able dict (a calibration file's ``cost`` block)."""
        return asdict(self)


def ConstantCost(
    iter_s: float = 0.01,
    learner_s: float = 0.0,
    sync_s: float = 0.0,
    prefill_s_per_token: float = 0.0,
) -> LinearCost:
    """A cost model with hand-computable answers, for tests: every decode iteration
    takes ``iter_s`` whatever the batch, a learner step ``learner_s``, a sync ``sync_s``."""
    return LinearCost(
        a_s=iter_s,
        b_s=0.0,
        c_s=0.0,
        prefill_s_per_token=prefill_s_per_token,
        learner_const_s=learner_s,
        sync_s=sync_s,
    )
