"""Static batching: one synchronous generation phase in waves, each running until its
longest response ends (Hugging Face ``generate``, TRL's ``GRPOTrainer`` without vLLM,
``rolloutlab real sync --engine-mode static``).

Requests are taken in submit order (row-major ``(prompt, sample)``) in waves of up to
``max_num_seqs``; a wave starts when the previous one has ended. Within a wave every
iteration produces one token per unfinished row, as in the continuous engine
(:func:`sim.engine.core.generate`): iteration ``k = 1..max(L)`` of a wave costs
``LinearCost.iteration_s``-wise ``a_s + b_s * running + c_s * context`` plus
``prefill_s_per_token`` times the prompt tokens prefilled in it (iteration 1 only), and a
row of ``L`` tokens gets its first token at iteration 1 and finishes at iteration ``L``.
What a wave runs depends on ``padded``:

- ``padded=True`` (``transformers`` ``generate``): the batch is one padded tensor, prompts
  left-padded to the wave's longest prompt ``P``, and finished rows keep decoding pad
  tokens until the wave ends: iteration ``k`` runs ``n`` rows over ``n (P + k - 1)``
  context tokens, and iteration 1 prefills ``n P`` tokens;
- ``padded=False`` (the torch engine's static mode, :mod:`real.engines.torch_engine`):
  a finished row leaves the batch but its slot is not refilled until the wave ends:
  iteration ``k`` runs the rows with ``L_i >= k`` over ``sum (p_i + k - 1)`` of them, and
  iteration 1 prefills ``sum p_i`` (no prefix caching: every row is its own sequence).

The sum is the same as the continuous engine's reference loop
(``tests/reference/engine_loop.py``) with admission only into an empty engine; the
closed form here is checked against a hand count in ``tests/test_static_batch.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rolloutlab.sim.models.cost import LinearCost

BATCHING = ("continuous", "static", "padded")
"""How a traced engine batched: ``continuous`` (the SimPy engine, :func:`sim.engine.core.generate`),
``static`` (waves, finished rows leave: :func:`static_generate` with ``padded=False``) or
``padded`` (waves of one padded tensor, Hugging Face ``generate``: ``padded=True``)."""


@dataclass(frozen=True)
class StaticBatch:
    """Times of one statically batched phase from its submit at 0 (s); arrays ``(n,)`` over
    the requests in submit order (row-major ``(prompt, sample)``)."""

    wave: np.ndarray
    """Wave index of each request (0, 1, ...)."""
    t_first_token: np.ndarray
    """End of each request's first iteration (its wave's prefill)."""
    t_finish: np.ndarray
    """End of the iteration that produced each request's last token."""
    wave_end: np.ndarray
    """``(n_waves,)`` end of each wave (its longest row's finish)."""


def iteration_features(lengths: np.ndarray, prompt_tokens: np.ndarray, padded: bool) -> np.ndarray:
    """``(max(L), 4)`` features of one wave's iterations: ``[1, running sequences,
    context tokens, prefill tokens]`` (module docstring), so that iteration ``k``'s time is
    ``features[k - 1] @ [a_s, b_s, c_s, prefill_s_per_token]``.

    ``lengths``, ``prompt_tokens``: ``(n,)`` response and prompt lengths (tokens) of the
    wave's rows; every length must be >= 1.
    """
    L = np.asarray(lengths, dtype=np.int64)
    p = np.asarray(prompt_tokens, dtype=np.int64)
    n, T = L.size, int(L.max())
    k = np.arange(1, T + 1)  # iteration index
    if padded:
        P = int(p.max())
        running = np.full(T, n, dtype=np.int64)
        context = n * (P + k - 1)
        prefill = np.where(k == 1, n * P, 0)
    else:
        alive = L[None, :] >= k[:, None]  # (T, n): row i still decoding at iteration k
        running = alive.sum(axis=1)
        context = (alive * (p[None, :] + k[:, None] - 1)).sum(axis=1)
        prefill = np.where(k == 1, int(p.sum()), 0)
    return np.column_stack([np.ones(T), running, context, prefill]).astype(float)


def static_generate(
    lengths: np.ndarray,
    prompt_tokens: np.ndarray,
    cost: LinearCost,
    max_num_seqs: int,
    padded: bool = True,
) -> StaticBatch:
    """Simulate one synchronous, statically batched generation phase (module docstring).

    Args:
        lengths: ``(n_prompts, G)`` response lengths (tokens, each >= 1).
        prompt_tokens: ``(n_prompts,)`` prompt lengths (tokens).
        cost: decode and prefill coefficients (``a_s, b_s, c_s, prefill_s_per_token``).
        max_num_seqs: rows per wave (the batch the engine holds).
        padded: finished rows and prompt padding stay in the batch (``generate``), or not.
    Returns: :class:`StaticBatch`. Raises ValueError on a length < 1 or ``max_num_seqs < 1``.
    """
    L = np.asarray(lengths, dtype=np.int64)
    n_prompts, G = L.shape
    flat = L.ravel()
    if flat.size and flat.min() < 1:
        raise ValueError("static_generate: every response length must be >= 1 token")
    if max_num_seqs < 1:
        raise ValueError(f"static_generate: max_num_seqs must be >= 1, got {max_num_seqs}")
    prompts = np.repeat(np.asarray(prompt_tokens, dtype=np.int64), G)
    coef = cost.coef()
    wave = np.arange(flat.size) // max_num_seqs
    t_first, t_finish = np.empty(flat.size), np.empty(flat.size)
    ends = []
    t0 = 0.0
    for w in range(int(wave.max()) + 1 if flat.size else 0):
        idx = np.flatnonzero(wave == w)
        t = t0 + np.cumsum(iteration_features(flat[idx], prompts[idx], padded) @ coef)
        t_first[idx] = t[0]
        t_finish[idx] = t[flat[idx] - 1]
        t0 = float(t[-1])
        ends.append(t0)
    return StaticBatch(wave, t_first, t_finish, np.asarray(ends))
