"""Multi-turn rollouts on the SimPy engine: model turns alternating with tool calls.

:func:`submit_turns` starts one step's ``n_prompts x G`` rollouts. Turn 0 of every rollout
is one :meth:`Engine.submit` (as a single-turn step, so a rollout of one turn is exactly a
single-turn rollout). When turn ``k`` of a rollout finishes and it is not the last (nor
clipped at ``max_response_length``), a SimPy process runs its tool call: it waits for a
sandbox (a ``simpy.Resource`` of ``sandboxes`` slots, shared by the whole run: the
concurrency limit), holds it for the call's latency (at most ``timeout_s``; a longer call
ends the rollout with finish reason ``tool_timeout`` when the timeout fires), then
submits turn ``k + 1`` to the **same worker** (a sticky session, as agent loops route a
conversation to the replica holding its KV cache). That worker still caches the
rollout's context (no KV limit on the slot worker), so turn ``k + 1`` prefills only the
tool's output tokens (all of its context without prefix caching); its decode iterations
cost over the whole context (:mod:`sim.models.cost`).

The result is a :class:`TurnBatch`: per-rollout arrays in the shape the trace writer reads
(:func:`sim.pipelines.sync.rollout_columns`), a ``done`` event, and one row per turn
(:attr:`TurnBatch.turn_rows`, the turns table of :mod:`sim.trace.turns`; a turn ends as
``tool_call``, or ends its rollout as ``stop``, ``length`` (clipped at the cap) or
``tool_timeout``: :data:`sim.trace.turns.TURN_FINISH_REASONS`).
The paged worker is not supported (its prefix cache keys whole prompts): :func:`check_engine`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy
from rolloutlab.sim.engine.batch import Batch
from rolloutlab.sim.engine.config import EngineConfig
from rolloutlab.sim.models.turns import MultiTurn

_LATER_TURN_KEYS = itertools.count(1)
"""Prompt keys of later turns, negated (never a prompt id), unique in the process (each
later turn is its own batch, and workers key their prefix caches by ``(batch.serial, key)``,
so this is belt and braces)."""


def check_engine(config: EngineConfig) -> None:
    """Raises ValueError when multi-turn rollouts cannot run on ``config``'s workers
    (KV blocks or a token budget: the paged worker)."""
    if config.paged:
        raise ValueError(
            "multi_turn: runs on the slot worker only (no KV blocks, no token budget): "
            "give --no-kv-cache, or a scenario without kv_blocks/max_num_batched_tokens"
        )


class TurnBatch:
    """One step's multi-turn rollouts (``n`` of them, row-major ``(prompt, sample)``).

    Arrays (``(n,)``): ``prompt_tokens`` (the first turn's prompt), ``response_tokens``
    (tokens generated over all turns), ``worker``, ``t_submit`` / ``t_first_token`` (of
    turn 0), ``t_finish`` (last token, or the tool timeout), ``finish_reason`` (``stop``,
    ``length`` or ``tool_timeout``), ``n_turns`` (turns run). ``done`` fires after the
    last rollout ends. ``turn_rows``: one dict per turn (:data:`sim.trace.turns.TURN_SCHEMA`
    columns except the run's keys).
    """

    def __init__(self, env: simpy.Environment, n: int, prompt_tokens: np.ndarray):
        self.env = env
        self.prompt_tokens = np.asarray(prompt_tokens, dtype=np.int64)
        self.response_tokens = np.zeros(n, dtype=np.int64)
        self.worker = np.full(n, -1, dtype=np.int64)
        self.t_submit = np.full(n, np.nan)
        self.t_first_token = np.full(n, np.nan)
        self.t_finish = np.full(n, np.nan)
        self.finish_reason = np.full(n, "stop", dtype=object)
        self.n_turns = np.zeros(n, dtype=np.int64)
        self.turn_rows: list[dict[str, Any]] = []
        self.remaining = n
        self.done = env.event()
        self.aborted = np.zeros(n, dtype=bool)  # (no aborts: the Batch fields pipelines read)
        self.abort_tokens = np.zeros(n, dtype=np.int64)
        self.on_finish: Callable[[TurnBatch, int, float], None] | None = None
        """Called as ``on_finish(batch, i, t)`` when rollout ``i`` ends (as :class:`Batch`)."""


def submit_turns(
    engine: Any,
    mt: MultiTurn,
    sandboxes: simpy.Resource | None,
    keys: np.ndarray,
    prompt_tokens: np.ndarray,
    lengths: np.ndarray,
    n_turns: np.ndarray,
    latencies: np.ndarray,
    cap: int,
    on_finish: Callable[[TurnBatch, int, float], None] | None = None,
) -> TurnBatch:
    """Start ``n`` multi-turn rollouts now on ``engine`` (a :class:`sim.engine.core.Engine`
    of slot workers); returns their :class:`TurnBatch` (wait on ``done``).

    Args:
        keys: ``(n,)`` prompt keys of turn 0 (group mates share its prefill).
        prompt_tokens: ``(n,)`` first-turn prompt tokens.
        lengths: ``(K, n)`` response tokens of each turn (``K >= n_turns.max()``).
        n_turns: ``(n,)`` turns of each rollout, in ``[1, K]``.
        latencies: ``(n, K)`` tool latency (s) of the call after each turn.
        cap: ``max_response_length``; a turn that reaches it ends its rollout (``length``).
        on_finish: called as ``on_finish(batch, i, t)`` when rollout ``i`` ends.
    """
    env = engine.env
    out = TurnBatch(env, len(n_turns), prompt_tokens)
    out.on_finish = on_finish
    context = out.prompt_tokens.copy()  # tokens in each rollout's context so far

    def end(i: int, t: float, reason: str) -> None:
        out.t_finish[i], out.finish_reason[i] = t, reason
        out.remaining -= 1
        if out.on_finish is not None:
            out.on_finish(out, i, t)
        if out.remaining == 0:
            out.done.succeed(out)

    def row(i: int, k: int, b: Batch, j: int, tool: tuple, reason: str) -> None:
        out.turn_rows.append(
            {
                "rollout": i,
                "turn": k,
                "worker": int(b.worker[j]),
                "context_tokens": int(b.prompt_[j]),
                "prefill_tokens": int(b.prefill_[j]),
                "response_tokens": int(b.resp_[j]),
                "t_submit": float(b.t_submit[j]),
                "t_first_token": float(b.first_[j]),
                "t_finish": float(b.finish_[j]),
                "t_tool_request": tool[0],
                "t_tool_start": tool[1],
                "t_tool_end": tool[2],
                "finish_reason": reason,
            }
        )

    def finished(i: int, k: int, b: Batch, j: int, t: float) -> None:
        out.response_tokens[i] += b.resp_[j]
        out.n_turns[i] = k + 1
        context[i] += b.resp_[j]
        if k == 0:
            out.worker[i], out.t_submit[i], out.t_first_token[i] = (
                b.worker[j],
                b.t_submit[j],
                b.first_[j],
            )
        clipped = b.resp_[j] >= cap
        if k + 1 >= n_turns[i] or clipped:
            reason = "length" if clipped else "stop"
            row(i, k, b, j, (None, None, None), reason)
            end(i, t, reason)
            return
        env.process(tool_call(i, k, b, j))

    def tool_call(i: int, k: int, b: Batch, j: int) -> Generator[Any, Any, None]:
        t_request = env.now
        req = sandboxes.request() if sandboxes is not None else None
        if req is not None:
            yield req
        t_start, lat = env.now, float(latencies[i, k])
        timed_out = mt.timeout_s is not None and lat > mt.timeout_s
        yield env.timeout(mt.timeout_s if timed_out else lat)
        if sandboxes is not None and req is not None:
            sandboxes.release(req)
        reason = "tool_timeout" if timed_out else "tool_call"
        row(i, k, b, j, (t_request, t_start, env.now), reason)
        if timed_out:
            end(i, env.now, reason)
            return
        context[i] += mt.tool_output_tokens
        nb = Batch(
            env,
            np.array([-next(_LATER_TURN_KEYS)]),
            np.array([context[i]]),
            np.array([lengths[k + 1, i]]),
            on_finish=lambda bb, jj, tt, i=i, k=k + 1: finished(i, k, bb, jj, tt),
        )
        if engine.config.prefix_caching:  # the worker still holds the earlier context
            nb.prefill_ = [mt.tool_output_tokens]
        nb.t_submit[:] = env.now
        engine.workers[int(b.worker[j])].enqueue(nb, np.array([0]))

    engine.submit(
        keys,
        prompt_tokens,
        lengths[0],
        on_finish=lambda b, j, t: finished(j, 0, b, j, t),
    )
    return out
