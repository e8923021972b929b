"""Fit the simulator's cost model to the finish time of every traced rollout.

The engine's schedule does not depend on the cost (:mod:`sim.engine.features`), so the
simulated finish time of rollout ``i`` (from its step's submit) is linear in the
coefficients::

    f_i = submit_delay_s + F_i . [a_s, b_s, c_s, prefill_s_per_token]

with ``F_i`` the iterations, running sequences, context tokens and prefill tokens summed
over the iterations up to ``i``'s finish. ``F_i`` comes from the simulator itself: the
finish times of :func:`sim.engine.core.generate` (exactly those of the plain loop
:func:`tests.reference.engine_loop.reference_generate`; unit costs are dyadic) under the four unit cost models ``(1,0,0,0) .. (0,0,0,1)``, with the step's
measured lengths; for a statically batched run (``batching`` ``static`` or ``padded``)
those of :func:`sim.engine.static_batch.static_generate` instead. ``submit_delay_s`` is the time from the submit to the engine's first
iteration (request set-up), a constant per step.

Every rollout of every fit step is one equation; rows are divided by their step's
measured makespan, so each step counts in relative terms whatever its length, and the
non-negative least-squares solution (``scipy.optimize.nnls``, columns scaled to unit
maximum) is the fit. A second pass leaves out steps that ran much slower than the first
fit predicts (another process on a shared CPU), see :func:`fit_finish_times`. Fitting finish times, not only makespans, fits the shape of a
step's time profile, which is what the idle fraction measures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from rolloutlab.analysis.inputs.run_input import StepLayout
from rolloutlab.sim.engine.core import EngineConfig, generate
from rolloutlab.sim.engine.static_batch import BATCHING, static_generate
from rolloutlab.sim.models.cost import LinearCost
from scipy import optimize

UNIT_COSTS = (  # the four unit cost models whose finish times are the features
    LinearCost(1, 0, 0, 0),
    LinearCost(0, 1, 0, 0),
    LinearCost(0, 0, 1, 0),
    LinearCost(0, 0, 0, 1),
)


def schedule(
    lengths: np.ndarray,
    prompt_tokens: np.ndarray,
    cost: LinearCost,
    engine: EngineConfig,
    batching: str = "continuous",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(worker, t_first_token, t_finish)``, each ``(n_prompts * G,)`` in row-major
    (prompt, sample) order, of one synchronous phase from its submit (s): the SimPy engine
    for ``batching="continuous"``, else :func:`sim.engine.static_batch.static_generate` in
    waves of ``engine.max_num_seqs`` on one worker (``"padded"``: Hugging Face
    ``generate``). Raises ValueError on a ``batching`` not in
    :data:`sim.engine.static_batch.BATCHING`."""
    if batching == "continuous":
        batch = generate(lengths, prompt_tokens, cost, engine)
        return batch.worker, batch.t_first_token, batch.t_finish
    if batching not in BATCHING:
        raise ValueError(f"batching must be one of {BATCHING}, got {batching!r}")
    out = static_generate(
        lengths, prompt_tokens, cost, engine.max_num_seqs, padded=batching == "padded"
    )
    return np.zeros(out.t_finish.size, dtype=np.int64), out.t_first_token, out.t_finish


def finish_features(
    lengths: np.ndarray,
    prompt_tokens: np.ndarray,
    engine: EngineConfig,
    batching: str = "continuous",
) -> np.ndarray:
    """``(n_prompts * G, 4)`` schedule features of each rollout's finish (module docstring),
    rows in row-major (prompt, sample) order; ``batching`` as :func:`schedule`."""
    cols = [schedule(lengths, prompt_tokens, unit, engine, batching)[2] for unit in UNIT_COSTS]
    return np.column_stack(cols)


@dataclass(frozen=True)
class FinishFit:
    """Cost model fitted to traced finish times."""

    cost: LinearCost
    """Decode/prefill coefficients (``a_s, b_s, c_s, prefill_s_per_token``); the rest 0."""
    submit_delay_s: float
    """Time from a step's submit to the engine's first iteration (s)."""
    rel_rmse: float
    """Root mean square of ``(predicted - measured) / step makespan`` over the fit rollouts."""
    n_rollouts: int
    """Equations (rollouts) the fit used."""
    n_steps: int
    """Steps the fit used."""
    dropped_steps: tuple[int, ...] = ()
    """Fit steps left out as slowed down by something else (``trim`` in :func:`fit_finish_times`)."""

    def to_dict(self) -> dict:
        """JSON-serialisable dict (cost coefficients flattened)."""
        return {
            **{
                k: v
                for k, v in self.cost.to_dict().items()
                if k in ("a_s", "b_s", "c_s", "prefill_s_per_token")
            },
            "submit_delay_s": self.submit_delay_s,
            "rel_rmse": self.rel_rmse,
            "n_rollouts": self.n_rollouts,
            "n_steps": self.n_steps,
            "dropped_steps": list(self.dropped_steps),
        }


def _nnls(blocks: list[np.ndarray], targets: list[np.ndarray]) -> np.ndarray:
    X, y = np.vstack(blocks), np.concatenate(targets)
    scale = np.where(X.max(axis=0) > 0, X.max(axis=0), 1.0)  # why: nnls on O(1) columns
    return optimize.nnls(X / scale, y)[0] / scale


def fit_finish_times(
    layouts: list[StepLayout],
    engine: EngineConfig,
    trim: float | None = 1.25,
    features: Callable[[StepLayout], np.ndarray] | None = None,
    batching: str = "continuous",
) -> FinishFit:
    """Fit :class:`FinishFit` to the measured finish times of ``layouts`` (module docstring).

    ``trim``: after a first fit, steps whose measured makespan exceeds ``trim`` times the
    median measured/predicted ratio are left out and the fit is redone (why: on a shared
    CPU another process can slow a whole step down; such a step says nothing about the
    engine). None: no second pass. ``features``: a step's ``(n, 4)`` schedule features
    (default :func:`finish_features` of its lengths with ``batching``; the multi-turn
    schedule in :mod:`analysis.idle.turns`).
    Raises: ValueError on fewer than 2 steps or a step whose makespan is not positive.
    """
    if len(layouts) < 2:
        raise ValueError(f"fit_finish_times: need >= 2 fit steps, got {len(layouts)}")
    blocks, targets, spans = [], [], []
    for lay in layouts:
        span = float(lay.finish_s.max())
        if not span > 0:
            raise ValueError(f"fit_finish_times: step {lay.step} has makespan {span} s")
        F = (
            features(lay)
            if features is not None
            else finish_features(lay.lengths, lay.prompt_tokens, engine, batching)
        )  # (n, 4)
        blocks.append(np.column_stack([np.ones(len(F)), F]) / span)  # (n, 5)
        targets.append(lay.finish_s / span)
        spans.append(span)
    coef = _nnls(blocks, targets)
    keep = np.ones(len(layouts), dtype=bool)
    if trim is not None:
        ratio = np.array(
            [1.0 / max(float((b @ coef).max()), 1e-12) for b in blocks]
        )  # measured / predicted
        keep = ratio <= trim * np.median(ratio)
        if keep.sum() >= 2 and not keep.all():
            coef = _nnls(
                [b for b, k in zip(blocks, keep) if k], [t for t, k in zip(targets, keep) if k]
            )
    X = np.vstack([b for b, k in zip(blocks, keep) if k])
    y = np.concatenate([t for t, k in zip(targets, keep) if k])
    rel_rmse = float(np.sqrt(np.mean((X @ coef - y) ** 2)))
    cost = LinearCost(a_s=coef[1], b_s=coef[2], c_s=coef[3], prefill_s_per_token=coef[4])
    dropped = tuple(int(lay.step) for lay, k in zip(layouts, keep) if not k)
    return FinishFit(cost, float(coef[0]), rel_rmse, len(y), int(keep.sum()), dropped)


def simulate_step(
    lengths: np.ndarray,
    prompt_tokens: np.ndarray,
    fit: FinishFit,
    engine: EngineConfig,
    batching: str = "continuous",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run one synchronous step on the simulated engine (:func:`schedule`) with the fitted cost.

    Returns ``(worker, t_first_token, t_finish)``, each ``(n_prompts * G,)``, times in s
    from the step's submit (``submit_delay_s`` included).
    """
    worker, t_first, t_finish = schedule(lengths, prompt_tokens, fit.cost, engine, batching)
    return worker, t_first + fit.submit_delay_s, t_finish + fit.submit_delay_s
