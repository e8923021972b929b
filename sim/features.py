"""Cost-free schedule features of one generation phase, fast (for calibration).

The engine's schedule (which iteration admits and finishes each request) does not
depend on the cost model, so a worker's busy time is linear in the cost coefficients:
``busy_w = features_w @ [a_s, b_s, c_s, prefill_s_per_token]``. This module computes
``features`` of :func:`sim.engine.reference_generate` without the per-iteration loop
(why: calibration evaluates thousands of 5120-rollout steps).

On one worker, with FIFO admission into ``max_num_seqs`` slots, a request admitted at
iteration ``k`` holds its slot for exactly ``L`` iterations, so admission is list
scheduling on ``max_num_seqs`` identical machines: request ``i`` (in queue order) starts
when the earliest slot frees (a heap). Then, per worker,
``iterations = max_i (start_i + L_i)``, ``sum running = sum_i L_i``,
``sum context = sum_i (L_i P_i + L_i (L_i - 1) / 2)`` (context before each of its
iterations: prompt ``P_i`` plus tokens generated so far), ``prefill = sum of P_i`` over
the first request of each prompt on that worker (all requests without prefix caching).
"""

from __future__ import annotations

import heapq

import numpy as np
import simpy
from rolloutlab.sim.cost import LinearCost
from rolloutlab.sim.engine import Batch, Engine, EngineConfig


def assign_workers(
    n_prompts: int,
    G: int,
    prompt_tokens: np.ndarray,
    lengths_flat: np.ndarray,
    config: EngineConfig,
) -> np.ndarray:
    """Worker of each request ``(n_prompts * G,)`` as a fresh :class:`Engine` would
    dispatch one submit of this step (same code path)."""
    env = simpy.Environment()
    keys = np.repeat(np.arange(n_prompts), G)
    batch = Batch(env, keys, np.repeat(prompt_tokens, G), lengths_flat)
    return Engine(env, LinearCost(0, 0, 0), config)._assign(batch)


def _slot_starts(lengths: np.ndarray, slots: int) -> np.ndarray:
    """Admission iteration of each request of one worker's FIFO queue (list scheduling)."""
    n = len(lengths)
    starts = np.zeros(n, dtype=np.int64)
    if n <= slots:
        return starts
    free = [int(x) for x in lengths[:slots]]  # slot free times of the first wave
    heapq.heapify(free)
    for i in range(slots, n):
        t = heapq.heappop(free)
        starts[i] = t
        heapq.heappush(free, t + int(lengths[i]))
    return starts


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
        ``features`` of :func:`sim.engine.reference_generate`.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    n_prompts, G = lengths.shape
    prompt_tokens = np.asarray(prompt_tokens, dtype=np.int64)
    flat = lengths.ravel()  # (n_prompts * G,)
    flat_prompt = np.repeat(prompt_tokens, G)
    keys = np.repeat(np.arange(n_prompts), G)
    worker = assign_workers(n_prompts, G, prompt_tokens, flat, config)
    out = np.zeros((config.n_workers, 4))
    for w in range(config.n_workers):
        idx = np.flatnonzero(worker == w)  # queue order = submit order
        if idx.size == 0:
            continue
        L, P = flat[idx], flat_prompt[idx]
        starts = _slot_starts(L, config.max_num_seqs)
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
    coef = np.array([cost.a_s, cost.b_s, cost.c_s, cost.prefill_s_per_token])
    return float((np.asarray(features) @ coef).max())
