"""The synchronous pipeline's multi-turn half: draws a step's turns, lengths and tool
latencies from the scenario's ``multi_turn`` block (:mod:`sim.models.turns`), runs them on
the engine (:func:`sim.engine.turns.submit_turns`) and collects the turns table
(:mod:`sim.trace.turns`). docs/multi_turn.md.

Which pipelines run multi-turn rollouts (:func:`check_multi_turn`): ``sync`` on the SimPy
engine with slot workers. The data-parallel ranks (workers) of a step meet at the step's
barrier: the step ends when the last rank's last rollout does (``rank_spread_s``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
import simpy
from rolloutlab.sim.engine.turns import TurnBatch, check_engine, submit_turns
from rolloutlab.sim.scenario.scenario import Scenario
from rolloutlab.sim.trace.turns import turn_frame


def check_multi_turn(scenario: Scenario, pipelines: Sequence, engine: str = "simpy") -> None:
    """Raises ValueError when ``scenario`` has a ``multi_turn`` block and a pipeline, the
    engine (``fast``) or the workers (paged) cannot run it; nothing otherwise."""
    if scenario.multi_turn is None:
        return
    if engine != "simpy":
        raise ValueError("multi_turn: runs on --engine simpy only (the fast path has no tools)")
    other = [p.spec for p in pipelines if p.kind != "sync"]
    if other:
        raise ValueError(
            f"multi_turn: runs under the sync pipeline only for now, got {', '.join(other)} "
            "(docs/multi_turn.md)"
        )
    check_engine(scenario.engine)


class MultiTurnRun:
    """One simulated run's multi-turn state: the sandboxes (one ``simpy.Resource`` for the
    run) and the turns tables of the steps so far (:attr:`tables`)."""

    def __init__(self, env: simpy.Environment, engine, scenario: Scenario):
        mt = scenario.multi_turn
        assert mt is not None
        check_engine(scenario.engine)
        self.engine, self.scenario, self.mt = engine, scenario, mt
        self.sandboxes = simpy.Resource(env, mt.sandboxes) if mt.sandboxes is not None else None
        self.tables: list[pl.DataFrame] = []

    def submit(self, seed: int, step: int, prompt_ids: np.ndarray, G: int) -> TurnBatch:
        """Start the ``len(prompt_ids) x G`` rollouts of ``step`` now (turn 0 lengths are
        the single-turn draw, :meth:`sim.models.turns.MultiTurn.turn_lengths`)."""
        mt, sc = self.mt, self.scenario
        n_turns = mt.turns.draw(seed, step, prompt_ids, G).ravel()
        K = int(n_turns.max())
        lengths = np.stack(
            [mt.turn_lengths(sc.lengths, seed, step, prompt_ids, G, k).ravel() for k in range(K)]
        )
        latencies = mt.latencies(seed, step, prompt_ids, G, K).reshape(len(n_turns), K)
        n = len(prompt_ids) * G
        return submit_turns(
            self.engine,
            mt,
            self.sandboxes,
            np.repeat(prompt_ids, G),
            np.full(n, sc.prompt_tokens),
            lengths,
            n_turns,
            latencies,
            sc.lengths.max_response_length,
        )

    def collect(
        self, run_id: str, step: int, prompt_ids: np.ndarray, G: int, batch: TurnBatch
    ) -> np.ndarray:
        """Store the step's turns table; return ``(n_prompts, G)`` tokens generated per
        rollout (over all its turns)."""
        self.tables.append(turn_frame(run_id, step, np.repeat(prompt_ids, G), G, batch.turn_rows))
        return batch.response_tokens.reshape(len(prompt_ids), G)
