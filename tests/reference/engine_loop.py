"""The plain per-iteration loop (:func:`reference_generate`) that one synchronous phase
of the SimPy engine (:func:`sim.engine.core.generate`) must equal; re-exported by
:mod:`sim.engine.core`."""

from __future__ import annotations

import numpy as np
from rolloutlab.sim.engine.config import EngineConfig
from rolloutlab.sim.engine.schedule import assign_workers
from rolloutlab.sim.models.cost import LinearCost

from tests.reference.kv_loop import paged_reference


def reference_generate(
    lengths: np.ndarray, prompt_tokens: np.ndarray, cost: LinearCost, config: EngineConfig
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Plain per-iteration loop of the same engine, for tests and calibration.

    Returns ``(times, features)``: ``times`` has flat arrays ``worker, t_first_token,
    t_finish`` like :func:`sim.engine.core.generate`; ``features`` is ``(n_workers, 4)``: per worker the
    number of iterations, sum of running sequences, sum of context tokens and prefill
    tokens over its iterations, so that the worker's busy time is
    ``features @ [a_s, b_s, c_s, prefill_s_per_token]``. Only static dispatch
    (``round_robin``/``group``, or ``least_loaded`` at one submit) is modelled. With
    ``config.paged`` the loop is :func:`tests.reference.kv_loop.paged_reference` (KV blocks,
    preemption, chunked prefill).
    """
    if config.paged:
        ref = paged_reference(lengths, prompt_tokens, cost, config)
        return ref.times, ref.features
    lengths = np.asarray(lengths)
    n_prompts, G = lengths.shape
    keys = np.repeat(np.arange(n_prompts), G)
    assign, _ = assign_workers(keys, config)
    flat_len = lengths.ravel()
    flat_prompt = np.repeat(np.asarray(prompt_tokens, dtype=np.int64), G)
    t_first = np.full(flat_len.size, np.nan)
    t_finish = np.full(flat_len.size, np.nan)
    features = np.zeros((config.n_workers, 4))
    coef = cost.coef()
    for w in range(config.n_workers):
        queue = list(np.flatnonzero(assign == w))
        running: dict[int, int] = {}  # request -> tokens generated
        cached: set[int] = set()
        t = 0.0
        while queue or running:
            new_prefill = 0
            while queue and len(running) < config.max_num_seqs:
                i = queue.pop(0)
                running[i] = 0
                if not config.prefix_caching or keys[i] not in cached:
                    new_prefill += int(flat_prompt[i])
                    cached.add(int(keys[i]))
            ctx = sum(int(flat_prompt[i]) + g for i, g in running.items())
            f = np.array([1.0, len(running), ctx, new_prefill])
            features[w] += f
            t += float(f @ coef)
            for i in list(running):
                running[i] += 1
                if running[i] == 1:
                    t_first[i] = t
                if running[i] == flat_len[i]:
                    t_finish[i] = t
                    del running[i]
    return {"worker": assign, "t_first_token": t_first, "t_finish": t_finish}, features
