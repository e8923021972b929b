"""Cost-free schedule features of one generation phase, fast (for calibration).

The engine's schedule (which iteration admits and finishes each request) does not
depend on the cost model, so a worker's busy time is linear in the cost coefficients:
``busy_w = features_w @ [a_s, b_s, c_s, prefill_s_per_token]``. This module computes
``features`` of :func:`tests.reference.engine_loop.reference_generate` without the per-iteration loop
(why: calibration evaluates thousands of 5120-rollout steps).

On one worker, with FIFO admission into ``max_num_seqs`` slots, a request admitted at
iteration ``k`` holds its slot for exactly ``L`` iterations, so admission is list
scheduling on ``max_num_seqs`` identical machines: request ``i`` (in queue order) starts
when the earliest slot frees (:func:`sim.engine.schedule.slot_starts`). Then, per worker,
``iterations = max_i (start_i + L_i)``, ``sum running = sum_i L_i``,
``sum context = sum_i (L_i P_i + L_i (L_i - 1) / 2)`` (context before each of its
iterations: prompt ``P_i`` plus tokens generated so far), ``prefill = sum of P_i`` over
the first request of each prompt on that worker (all requests without prefix caching).
"""

from __future__ import annotations

import numpy as np
from rolloutlab.sim.engine.config import EngineConfig
from rolloutlab.sim.engine.schedule import assign_workers, slot_starts
from rolloutlab.sim.models.cost import LinearCost


def schedule_features(
    lengths: np.ndarray, prompt_tokens: np.ndarray, config: EngineConfig
) -> np.ndarray:
    """Per-worker features of one synchronous generation phase.

    Args:
        lengths: ``(n_prompts, G)`` response lengths (tokens, >= 1).
        prompt_tokens: ``(n_prompts,)`` prompt lengths (tokens).
        config: the engine (workers, ``max_num_seqs``, dispatch, prefix caching).
    Returns: ``(n_workers, 4)`` float array: iterations, sum of running sequences, sum
        of context tokens and prefill tokens over the worker's iterations; equal to the
        ``features`` of :func:`tests.reference.engine_loop.reference_generate`.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    n_prompts, G = lengths.shape
    prompt_tokens = np.asarray(prompt_tokens, dtype=np.int64)
    flat = lengths.ravel()  # (n_prompts * G,)
    flat_prompt = np.repeat(prompt_tokens, G)
    keys = np.repeat(np.arange(n_prompts), G)
    worker, _ = assign_workers(keys, config)
    out = np.zeros((config.n_workers, 4))
    for w in range(config.n_workers):
        idx = np.flatnonzero(worker == w)  # queue order = submit order
        if idx.size == 0:
            continue
        L, P = flat[idx], flat_prompt[idx]
        starts = slot_starts(L, config.max_num_seqs)
        if config.prefix_caching:
            _, first = np.unique(keys[idx], return_index=True)
            prefill = P[first].sum()
        else:
            prefill = P.sum()
        out[w] = (
            float((starts + L).max()),
            float(L.sum()),
            float((L * P + L * (L - 1) // 2).sum()),
            float(prefill),
        )
    return out


def makespan_s(features: np.ndarray, cost: LinearCost) -> float:
    """Generation makespan (s) = slowest worker's busy time, from :func:`schedule_features`."""
    return float((np.asarray(features) @ cost.coef()).max())
