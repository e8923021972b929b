"""Turn bookkeeping of a multi-turn rollout in the torch engine (:mod:`real.engines.torch_engine`).

A request with a ``tool`` (:attr:`real.engines.interface.RolloutRequest.tool`) is a
sequence of model turns: a turn ends when the model samples the tool token
(:data:`real.tasks.lookup.TOOL_ID`); the engine then parks the sequence (its slot and KV
cache stay: the next turn prefills only the tool token and the tool's output), asks the
tool for its output and latency, and resumes it at ``t_tool_end``. Each turn is one dict
in ``result.turns`` with the columns of :data:`sim.trace.turns.TURN_SCHEMA` that the
engine knows (not the run's keys). The tool runs at once (no sandbox limit), so
``t_tool_request == t_tool_start``.
"""

from __future__ import annotations

from typing import Any


def open_turn(turns: list[dict[str, Any]], context: int, prefill: int, t_submit: float) -> None:
    """Start turn ``len(turns)``: ``context`` tokens in its prompt, ``prefill`` of them
    computed (the rest cached), submitted at ``t_submit`` (s)."""
    turns.append(
        {
            "turn": len(turns),
            "context_tokens": context,
            "prefill_tokens": prefill,
            "response_tokens": 0,
            "t_submit": t_submit,
            "t_first_token": None,
            "t_finish": None,
            "t_tool_request": None,
            "t_tool_start": None,
            "t_tool_end": None,
            "finish_reason": None,
        }
    )


def on_token(turns: list[dict[str, Any]], now: float) -> None:
    """Count one sampled token of the open turn at ``now`` (s)."""
    turn = turns[-1]
    if turn["t_first_token"] is None:
        turn["t_first_token"] = now
    turn["response_tokens"] += 1


def close_turn(
    turns: list[dict[str, Any]], now: float, reason: str, tool_end: float | None = None
) -> None:
    """End the open turn at ``now`` with ``reason`` (``tool_call``: its tool returns at
    ``tool_end``; ``stop`` / ``length``: the rollout's last turn)."""
    turn = turns[-1]
    turn["t_finish"], turn["finish_reason"] = now, reason
    if reason == "tool_call":
        turn["t_tool_request"] = turn["t_tool_start"] = now
        turn["t_tool_end"] = tool_end
