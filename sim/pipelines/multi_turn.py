"""The synchronous pipeline's multi-turn half: draws a step's turns, lengths and tool
latencies from the scenario's ``multi_turn`` block (:mod:`sim.models.turns`), runs them on
the engine (:func:`sim.engine.turns.submit_turns`) and collects the turns table
(:mod:`sim.trace.turns`). docs/multi_turn.md.

Which pipelines run multi-turn rollouts (:func:`check_multi_turn`): on the SimPy engine
with slot workers, ``sync`` and the batch-serial asynchronous kinds (:data:`MULTI_TURN_KINDS`)
under the ``inflight`` or ``drain`` weight sync. The data-parallel ranks (workers) of a
synchronous step meet at the step's barrier: the step ends when the last rank's last
rollout does (``rank_spread_s``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
import simpy
from rolloutlab.sim.engine.turns import TurnBatch, check_engine, submit_turns
from rolloutlab.sim.scenario.scenario import Scenario
from rolloutlab.sim.trace.turns import TURN_SCHEMA, turn_frame

MULTI_TURN_KINDS = ("sync", "one-step-off", "interval", "bounded", "partial")
"""Pipeline kinds that run multi-turn rollouts: those that never abort a rollout
(``oversample``, ``groupover`` and ``async`` abort or relaunch them)."""


def check_multi_turn(scenario: Scenario, pipelines: Sequence, engine: str = "simpy") -> None:
    """Raises ValueError when ``scenario`` has a ``multi_turn`` block and a pipeline, the
    engine (``fast``) or the workers (paged) cannot run it; nothing otherwise."""
    if scenario.multi_turn is None:
        return
    if engine != "simpy":
        raise ValueError("multi_turn: runs on --engine simpy only (the fast path has no tools)")
    other = [
        p.spec
        for p in pipelines
        if p.kind not in MULTI_TURN_KINDS or p.sync_mode == "abort" or p.chunk is not None
    ]
    if other:
        raise ValueError(
            f"multi_turn: runs under the {', '.join(MULTI_TURN_KINDS)} pipelines with "
            f"sync mode inflight or drain (no chunk=T), got {', '.join(other)} "
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
        self.tracked: list[tuple[int, np.ndarray, int, TurnBatch]] = []

    def submit(
        self, seed: int, step: int, prompt_ids: np.ndarray, G: int, on_finish=None
    ) -> TurnBatch:
        """Start the ``len(prompt_ids) x G`` rollouts of ``step`` (a learner step, or an
        asynchronous pipeline's batch) now; turn 0 lengths are the single-turn draw
        (:meth:`sim.models.turns.MultiTurn.turn_lengths`); ``on_finish(batch, i, t)`` at
        each rollout's end."""
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
            on_finish,
        )

    def collect(
        self, run_id: str, step: int, prompt_ids: np.ndarray, G: int, batch: TurnBatch
    ) -> np.ndarray:
        """Store the step's turns table; return ``(n_prompts, G)`` tokens generated per
        rollout (over all its turns)."""
        self.tables.append(turn_frame(run_id, step, np.repeat(prompt_ids, G), G, batch.turn_rows))
        return batch.response_tokens.reshape(len(prompt_ids), G)

    def dispatch(
        self, seed: int, j: int, prompt_ids: np.ndarray, G: int, on_finish
    ) -> tuple[TurnBatch, np.ndarray]:
        """An asynchronous pipeline's batch ``j``: :meth:`submit` it and remember it (its
        turns table is built at the end, :meth:`keyed_by_rollouts`). Returns the batch and
        a ``(n_prompts, G)`` view of its tokens over all turns (filled in as rollouts end)."""
        batch = self.submit(seed, j, prompt_ids, G, on_finish)
        self.tracked.append((j, prompt_ids, G, batch))
        return batch, batch.response_tokens.reshape(len(prompt_ids), G)

    def keyed_by_rollouts(self, run_id: str, rollouts: pl.DataFrame) -> pl.DataFrame:
        """The turns tables of the :meth:`dispatch`-ed batches (turns ended so far), with ``step`` set to the learner step of each turn's rollout in ``rollouts`` (joined
        on ``(run_id, prompt_id, sample_idx)``: an asynchronous pipeline's prompt ids are
        unique); turns of rollouts not in ``rollouts`` (running at the end) are left out."""
        self.tables = [
            turn_frame(run_id, j, np.repeat(ids, G), G, b.turn_rows)
            for j, ids, G, b in self.tracked
        ]
        if not self.tables:
            return pl.DataFrame(schema=TURN_SCHEMA)
        keys = ["run_id", "prompt_id", "sample_idx"]
        steps = rollouts.select(*keys, "step").unique(keys, keep="first")
        turns = pl.concat(self.tables).drop("step").join(steps, on=keys, how="inner")
        return turns.select(list(TURN_SCHEMA)).sort("step", "prompt_id", "sample_idx", "turn")
