"""The schedule that a multi-turn step runs on one slot worker, iteration by iteration,
with its cost features: what the cost fit of :mod:`analysis.idle.turns` regresses on.

With tool calls the engine's schedule depends on the cost (a call returning at time ``t``
joins the batch at the first iteration boundary at or after ``t``, so which iterations a
rollout shares depends on how long they take), so the features of
:mod:`analysis.idle.finish_fit` (the schedule under unit costs) are exact only at tool
latency 0. :func:`turn_features` runs the schedule under a given cost and with the
measured tool latencies, and returns, for every rollout, the features summed over the
iterations up to its finish (iterations, running sequences, context tokens, prefill
tokens: :meth:`sim.models.cost.LinearCost.coef`) and the time the worker sat idle before
it (no sequence running, some call out: the engine sleeps). Along that schedule the
finish time is linear in the coefficients:
``t_finish = submit_delay + features . [a_s, b_s, c_s, prefill_s_per_token] + idle``,
so :func:`analysis.idle.turns.fit_turn_cost` alternates: schedule under the current fit,
non-negative least squares on its features, until the fit stops improving.

The rules are those of :class:`sim.engine.slot_worker.Worker` with
:func:`sim.engine.turns.submit_turns` (FIFO admission into ``max_num_seqs`` slots; the
admitting iteration prefills and yields the first token; a turn of ``r`` tokens runs
``r`` iterations; a later turn prefills the tool's output only with prefix caching, its
whole context otherwise; turn 0 of group mates prefills once with prefix caching), one
worker, no sandbox limit, no timeout; ``tests/test_turn_schedule.py`` checks the finish
times against the SimPy engine.
"""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np
from rolloutlab.sim.models.cost import LinearCost


def turn_features(
    lengths: np.ndarray,
    n_turns: np.ndarray,
    latencies: np.ndarray,
    prompt_tokens: np.ndarray,
    G: int,
    cost: LinearCost,
    max_num_seqs: int,
    tool_output_tokens: int,
    prefix_caching: bool,
    cap: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One synchronous multi-turn step on one slot worker from time 0 (module docstring).

    Args:
        lengths: ``(K, n)`` sampled tokens of each turn (>= 1 where run).
        n_turns: ``(n,)`` turns of each rollout, in ``[1, K]``.
        latencies: ``(n, K)`` tool latency (s) of the call after each turn.
        prompt_tokens: ``(n_prompts,)`` first-turn prompt tokens; ``n = n_prompts * G``,
            rollouts row-major ``(prompt, sample)``.
        cap: ``max_response_length``: a turn reaching it ends its rollout.
    Returns: ``(features, idle_s, t_finish)``: ``(n, 4)`` features summed over the
        iterations up to each rollout's finish, ``(n,)`` worker idle time (s) before it,
        ``(n,)`` its finish time (s, no submit delay) under ``cost``.
    Raises: ValueError when ``max_num_seqs < 1`` or the shapes disagree.
    """
    n = len(n_turns)
    if max_num_seqs < 1 or lengths.shape[1] != n or latencies.shape[0] != n:
        raise ValueError(
            f"turn_features: max_num_seqs {max_num_seqs}, lengths {lengths.shape}, "
            f"latencies {latencies.shape} for {n} rollouts"
        )
    coef = cost.coef()
    context = np.repeat(np.asarray(prompt_tokens, dtype=np.int64), G)
    waiting: deque[tuple[int, int]] = deque((i, 0) for i in range(n))  # (rollout, turn)
    tools: list[tuple[float, int, int, int]] = []  # heap (t_ready, order, rollout, turn)
    running: dict[int, list[int]] = {}  # rollout -> [turn, tokens so far, turn length]
    prefilled: set[int] = set()  # prompts whose turn-0 prefill is cached
    feats, idle = np.zeros((n, 4)), np.zeros(n)
    t_finish = np.zeros(n)
    F, idle_s, t, order = np.zeros(4), 0.0, 0.0, 0
    while waiting or running or tools:
        while tools and tools[0][0] <= t:
            _, _, i, k = heapq.heappop(tools)
            waiting.append((i, k))
        if not waiting and not running:  # only calls out: the worker idles
            idle_s += tools[0][0] - t
            t = tools[0][0]
            continue
        prefill = 0
        while waiting and len(running) < max_num_seqs:
            i, k = waiting.popleft()
            if k > 0 and prefix_caching:
                prefill += tool_output_tokens
            elif k > 0 or not prefix_caching or i // G not in prefilled:
                prefill += int(context[i])
                prefilled.add(i // G)
            running[i] = [k, 0, int(max(lengths[k, i], 1))]
        ctx = sum(int(context[i]) for i in running)
        x = np.array([1.0, len(running), ctx, prefill])
        F += x
        t += float(x @ coef)
        for i in list(running):
            r = running[i]
            r[1] += 1
            context[i] += 1
            if r[1] < r[2]:
                continue
            del running[i]
            k = r[0]
            if k + 1 >= n_turns[i] or r[2] >= cap:
                feats[i], idle[i], t_finish[i] = F, idle_s, t
                continue
            context[i] += tool_output_tokens
            heapq.heappush(tools, (t + float(latencies[i, k]), order, i, k + 1))
            order += 1
    return feats, idle, t_finish
