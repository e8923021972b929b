"""SimPy model of rollout generation: W worker replicas, each a continuous-batching engine,
and the dispatcher in front of them (one SimPy environment).

The workers are :class:`sim.engine.slot_worker.Worker` (slots only, closed-form decode) or
:class:`sim.engine.paged_worker.PagedWorker` (KV blocks, preemption, chunked prefill), both
:class:`sim.engine.worker.EngineWorker`. :func:`generate` runs one synchronous
generation phase; the plain per-iteration loops it must equal are in ``tests/reference/``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import simpy
from rolloutlab.sim.engine import interrupts
from rolloutlab.sim.engine.batch import Batch
from rolloutlab.sim.engine.config import DISPATCH, EngineConfig
from rolloutlab.sim.engine.dispatch import HELD_DISPATCH, HeldQueue, parse_dispatch
from rolloutlab.sim.engine.paged_worker import PagedWorker
from rolloutlab.sim.engine.schedule import assign_workers
from rolloutlab.sim.engine.slot_worker import Worker
from rolloutlab.sim.engine.speculative_paged_worker import SpeculativePagedWorker
from rolloutlab.sim.engine.speculative_worker import SpeculativeWorker
from rolloutlab.sim.engine.worker import EngineWorker
from rolloutlab.sim.models.cost import LinearCost

__all__ = ["DISPATCH", "Engine", "EngineConfig", "Worker", "generate"]


class Engine:
    """W worker replicas and a dispatcher, inside one SimPy environment: :class:`Worker`,
    or :class:`sim.engine.paged_worker.PagedWorker` when ``config.paged`` (KV blocks or a token budget);
    both are :class:`sim.engine.worker.EngineWorker`, all this class and
    :mod:`sim.engine.interrupts` use."""

    def __init__(self, env: simpy.Environment, cost: LinearCost, config: EngineConfig):
        self.env, self.cost, self.config = env, cost, config
        worker_cls: type[EngineWorker]
        if config.speculative is not None:
            worker_cls = SpeculativePagedWorker if config.paged else SpeculativeWorker
        else:
            worker_cls = PagedWorker if config.paged else Worker
        self.workers: list[EngineWorker] = [
            worker_cls(env, w, cost, config) for w in range(config.n_workers)
        ]
        self._rr = 0
        kind, T = parse_dispatch(config.dispatch)
        self.held: HeldQueue | None = None
        if kind in HELD_DISPATCH:  # requests wait at the engine for a free slot
            self.held = HeldQueue(self.workers, config.max_num_seqs, T)
            for w in self.workers:
                w.on_free = self.held.feed

    def submit(
        self,
        prompt_keys,
        prompt_tokens,
        response_tokens,
        on_finish: Callable | None = None,
        exclusive: bool = False,
        step: int = 0,
    ) -> Batch:
        """Submit requests now; returns their :class:`Batch` (wait on ``batch.done``).

        ``exclusive``: see :class:`Batch` (ignored by ``shared`` / ``deferred:T``
        dispatch, which hold requests here: :mod:`sim.engine.dispatch`). ``step``: the
        learner step the requests belong to (per-step draws of speculative decoding,
        :mod:`sim.engine.speculative`). Raises RuntimeError if
        an exclusive batch is still running on a worker that receives a request.
        """
        batch = Batch(self.env, prompt_keys, prompt_tokens, response_tokens, on_finish, exclusive)
        batch.t_submit[:] = self.env.now
        batch.step = step
        if self.held is not None:  # handed to slots as they free: no closed-form phase
            batch.coalesce = False
            self.held.put(batch, len(batch.response_tokens))
            return batch
        assign = self._assign(batch)
        for w, worker in enumerate(self.workers):
            idx = np.flatnonzero(assign == w)
            if idx.size:
                worker.enqueue(batch, idx)
        return batch

    def pause(self) -> simpy.Event:
        """Stop every worker at its next iteration boundary; see :func:`sim.engine.interrupts.pause`."""
        return interrupts.pause(self)

    def resume(self) -> None:
        """Let the workers stopped by :meth:`pause` continue now."""
        interrupts.resume(self)

    def abort(self, batch: Batch, idx) -> None:
        """Abort requests ``idx`` of ``batch``; see :func:`sim.engine.interrupts.abort`."""
        interrupts.abort(self, batch, idx)

    def _assign(self, batch: Batch) -> np.ndarray:
        """``(n,)`` worker of each request of ``batch`` (:func:`sim.engine.schedule.assign_workers`
        from the current round-robin position and loads); advances the position."""
        load = None
        if self.config.dispatch == "least_loaded":
            load = np.array([wk.outstanding for wk in self.workers], dtype=np.int64)
        out, rr = assign_workers(batch.prompt_keys, self.config, self._rr, load)
        self._rr = int(rr)
        return out


def generate(
    lengths: np.ndarray,
    prompt_tokens: np.ndarray,
    cost: LinearCost,
    config: EngineConfig,
    exclusive: bool = True,
) -> Batch:
    """Simulate one synchronous generation phase from time 0 (the plain loop it must
    equal: :func:`tests.reference.engine_loop.reference_generate`).

    Args:
        lengths: ``(n_prompts, G)`` response lengths (tokens).
        prompt_tokens: ``(n_prompts,)`` prompt lengths (tokens).
        exclusive: run workers in closed form to the end (one event each) or with
            one event per completion; both give the same times.
    Returns: the finished :class:`Batch`; its arrays are flat ``(n_prompts * G,)``,
        row-major in ``(prompt, sample)``.
    """
    lengths = np.asarray(lengths)
    n_prompts, G = lengths.shape
    env = simpy.Environment()
    engine = Engine(env, cost, config)
    keys = np.repeat(np.arange(n_prompts), G)
    batch = engine.submit(
        keys, np.repeat(np.asarray(prompt_tokens), G), lengths.ravel(), exclusive=exclusive
    )
    env.run(until=batch.done)
    return batch
