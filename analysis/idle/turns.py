"""Multi-turn steps for ``rolloutlab compare idle``: a traced run with a ``turns.parquet``
(the real ``lookup`` task) predicted through the simulator's multi-turn engine
(:func:`sim.engine.turns.submit_turns`), docs/multi_turn.md "Comparing".

- Cost fit (:func:`fit_turn_cost`): on the schedule that runs with each turn's measured
  length and each call's measured latency. With tools the schedule depends on the cost,
  so the fit alternates: start from the features at latency 0 (finish minus the
  rollout's own tool time as the target), then run the schedule under the current fit
  (:func:`analysis.idle.turn_schedule.turn_features`: iterations, running sequences, context
  and prefill tokens summed up to each finish, and the worker's idle time), refit by
  non-negative least squares (:func:`analysis.idle.finish_fit.fit_finish_times`) against
  finish minus idle, and keep the fit whose own schedule is closest to the measured
  finishes.
- ``replay``: every rollout's measured turn count, per-turn lengths and tool latencies.
- ``drawn``: the block that ``calibrate turns`` fits to the fit steps
  (:func:`calibration.fits.turns_fit.fit_multi_turn`): turn counts from its turn law
  (chosen by likelihood: on ``lookup`` the empirical table of 2-4 turns), tool latencies
  from its shifted lognormal, the tool's output tokens; per-turn lengths resampled from
  the fit steps (non-last and last turns from their own pools: on ``lookup`` a non-last
  turn writes a tag and ``?``, the last ``=`` and digits).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl
import simpy
from rolloutlab.analysis.idle.finish_fit import UNIT_COSTS, FinishFit, fit_finish_times
from rolloutlab.analysis.idle.turn_schedule import turn_features
from rolloutlab.analysis.inputs.run_input import StepLayout
from rolloutlab.calibration.fits.turns_fit import fit_multi_turn
from rolloutlab.sim.engine.core import Engine, EngineConfig
from rolloutlab.sim.engine.turns import submit_turns
from rolloutlab.sim.models.cost import LinearCost
from rolloutlab.sim.models.turns import MultiTurn, multi_turn_from


@dataclass(frozen=True)
class StepTurns:
    """One step's measured turns, rollouts in the order of its :class:`StepLayout`."""

    n_turns: np.ndarray
    """``(n,)`` turns per rollout."""
    lengths: np.ndarray
    """``(K, n)`` sampled tokens of each turn (0 past a rollout's last turn)."""
    latencies: np.ndarray
    """``(n, K)`` tool latency (s) of the call after each turn (0 where none)."""
    tool_s: np.ndarray
    """``(n,)`` a rollout's total tool time (s): ``sum(t_tool_end - t_tool_request)``."""


def step_turns(turns: pl.DataFrame, lay: StepLayout, order: pl.DataFrame) -> StepTurns:
    """:class:`StepTurns` of ``lay`` from the run's turns table; ``order``: the step's
    ``prompt_id, sample_idx`` in layout order. Raises ValueError naming the step when a
    rollout has no turn row."""
    n = order.height
    t = (
        order.with_row_index("_i")
        .join(turns.filter(pl.col("step") == lay.step), on=["prompt_id", "sample_idx"])
        .with_columns(
            (pl.col("t_tool_end") - pl.col("t_tool_request")).fill_null(0.0).alias("_lat")
        )
    )
    i = t["_i"].to_numpy().astype(np.int64)
    if np.unique(i).size != n:
        raise ValueError(
            f"turns.parquet: step {lay.step}: {n - np.unique(i).size} rollouts lack turns"
        )
    k = t["turn"].to_numpy()
    K = int(k.max()) + 1
    lengths, lat = np.zeros((K, n), np.int64), np.zeros((n, K))
    lengths[k, i] = t["response_tokens"].to_numpy()
    lat[i, k] = t["_lat"].to_numpy()
    n_turns = np.bincount(i, minlength=n).astype(np.int64)
    return StepTurns(n_turns, lengths, lat, lat.sum(axis=1))


def run_turns(
    st: StepTurns, prompt_tokens: np.ndarray, G: int, cost: LinearCost, engine: EngineConfig,
    mt: MultiTurn, cap: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """One synchronous multi-turn step on the SimPy engine from time 0.

    Returns ``(worker, t_first_token, t_finish)``, each ``(n,)`` (s), row-major (prompt,
    sample); ``prompt_tokens`` is ``(n_prompts,)``. Tool calls run at once (no sandbox
    limit, no timeout: the ``lookup`` tool)."""
    env = simpy.Environment()
    eng = Engine(env, cost, engine)
    n_prompts = len(prompt_tokens)
    b = submit_turns(
        eng, mt, None, np.repeat(np.arange(n_prompts), G),
        np.repeat(np.asarray(prompt_tokens), G), np.maximum(st.lengths, 1), st.n_turns,
        st.latencies, cap,
    )  # fmt: skip
    env.run(until=b.done)
    return b.worker, b.t_first_token, b.t_finish


def zero_latency_fit(
    layouts: list[StepLayout], turns: list[StepTurns], engine: EngineConfig, mt: MultiTurn, cap: int
) -> FinishFit:
    """The starting fit: features of the schedule at tool latency 0 against each rollout's
    measured finish minus its own tool time."""
    by_step = {lay.step: (lay, st) for lay, st in zip(layouts, turns)}

    def features(lay: StepLayout) -> np.ndarray:
        st = by_step[lay.step][1]
        flat = StepTurns(st.n_turns, st.lengths, np.zeros_like(st.latencies), st.tool_s)
        G = lay.lengths.shape[1]
        return np.column_stack(
            [run_turns(flat, lay.prompt_tokens, G, u, engine, mt, cap)[2] for u in UNIT_COSTS]
        )

    parked = [
        StepLayout(lay.step, lay.lengths, lay.prompt_tokens, lay.finish_s - st.tool_s)
        for lay, st in zip(layouts, turns)
    ]
    return fit_finish_times(parked, engine, features=features)


def turn_schedules(
    layouts: list[StepLayout], turns: list[StepTurns], engine: EngineConfig, mt: MultiTurn,
    cap: int, cost: LinearCost,
) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:  # fmt: skip
    """``step -> (features, idle_s, t_finish)`` of :func:`turn_features` under ``cost``."""
    return {
        lay.step: turn_features(
            np.maximum(st.lengths, 1),
            st.n_turns,
            st.latencies,
            lay.prompt_tokens,
            lay.lengths.shape[1],
            cost,
            engine.max_num_seqs,
            mt.tool_output_tokens,
            engine.prefix_caching,
            cap,
        )  # fmt: skip
        for lay, st in zip(layouts, turns)
    }


def schedule_rmse(layouts: list[StepLayout], fit: FinishFit, sched: dict) -> float:
    """Root mean square of ``(simulated - measured finish) / step makespan`` over the
    rollouts of ``layouts``, the simulated finishes being ``sched``'s (under ``fit``)."""
    err = [
        (sched[lay.step][2] + fit.submit_delay_s - lay.finish_s) / lay.finish_s.max()
        for lay in layouts
    ]
    return float(np.sqrt(np.mean(np.concatenate(err) ** 2)))


def fit_turn_cost(
    layouts: list[StepLayout], turns: list[StepTurns], engine: EngineConfig, mt: MultiTurn,
    cap: int, rounds: int = 6,
) -> FinishFit:  # fmt: skip
    """The cost fit of the module docstring on ``layouts`` (their :class:`StepTurns`).

    Starts from the zero-latency fit, then ``rounds`` times: the schedule that runs with
    the measured latencies under the current fit (:func:`analysis.idle.turn_schedule.turn_features`),
    non-negative least squares of its features against each rollout's measured finish
    minus the worker's idle time before it (:func:`analysis.idle.finish_fit.fit_finish_times`).
    Returns the fit whose own schedule is closest to the measured finishes
    (:func:`schedule_rmse`; its ``rel_rmse`` is that error). Several workers: the
    zero-latency fit (the schedule loop is one worker's)."""
    fit = zero_latency_fit(layouts, turns, engine, mt, cap)
    if engine.n_workers != 1:
        return fit
    best, best_err = fit, np.inf
    for _ in range(rounds + 1):
        sched = turn_schedules(layouts, turns, engine, mt, cap, fit.cost)
        err = schedule_rmse(layouts, fit, sched)
        if err < best_err:
            best, best_err = dataclasses.replace(fit, rel_rmse=err), err
        idle = [
            StepLayout(lay.step, lay.lengths, lay.prompt_tokens, lay.finish_s - sched[lay.step][1])
            for lay in layouts
        ]
        fit = fit_finish_times(idle, engine, features=_scheduled_features(sched))
    return best


def _scheduled_features(
    sched: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> Callable[[StepLayout], np.ndarray]:
    """A layout's features under one round's schedule (bound here, not by the loop)."""
    return lambda lay: sched[lay.step][0]


def fitted_block(turns: pl.DataFrame, fit_step_ids: list[int]) -> MultiTurn:
    """``calibrate turns``' block fitted to the fit steps' rows of ``turns``."""
    rows = turns.filter(pl.col("step").is_in(fit_step_ids))
    return multi_turn_from(fit_multi_turn(rows, 1.0, "turns.parquet")["multi_turn"])


@dataclass(frozen=True)
class TurnDraws:
    """Empirical length pools of the fit steps and the fitted block, for the ``drawn``
    prediction."""

    mid_lengths: np.ndarray
    last_lengths: np.ndarray
    mt: MultiTurn

    @classmethod
    def fit(cls, turns: list[StepTurns], mt: MultiTurn) -> TurnDraws:
        """Pools of ``turns`` (the fit steps) and the fitted block ``mt``."""
        mid, last = [], []
        for s in turns:
            k = np.arange(s.lengths.shape[0])[:, None]
            mid.append(s.lengths[k < s.n_turns[None, :] - 1])
            last.append(s.lengths[s.n_turns - 1, np.arange(len(s.n_turns))])
        return cls(np.concatenate(mid), np.concatenate(last), mt)

    def draw(self, rng: np.random.Generator, n: int) -> StepTurns:
        """``n`` rollouts' turns: counts from the block's turn law, lengths resampled from
        the pools, latencies from the block's latency law."""
        nt = self.mt.turns.from_uniform(rng.uniform(1e-12, 1.0, n))
        K = int(nt.max())
        lengths = (
            rng.choice(self.mid_lengths, (K, n))
            if self.mid_lengths.size
            else np.ones((K, n), np.int64)
        )
        lengths[nt - 1, np.arange(n)] = rng.choice(self.last_lengths, n)
        lat = self.mt.tool_latency.draw(rng.uniform(1e-12, 1.0, (n, K)))
        return StepTurns(nt, lengths, lat, lat.sum(axis=1))
