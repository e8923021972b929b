"""SimPy model of rollout generation: W workers, each a continuous-batching engine.

Life cycle of a request: submitted to a worker (dispatch policy) and queued FIFO;
admitted at an iteration boundary when a slot is free (``max_num_seqs``); the
admitting iteration prefills its prompt (prompt tokens already prefilled on that
worker — the other samples of its group — are free: prefix caching) and yields the
first token; each further iteration decodes one token; the request finishes at the
boundary after its last token (``response_tokens`` iterations in all).

Iteration ``j`` of a worker with ``n`` running sequences costs
``a + b n + c * context_j`` (+ prefill of the prompts admitted at ``j``), see
:mod:`sim.cost`. Between two batch changes (an admission or a completion) ``n`` is
fixed and the context grows by ``n`` per iteration, so ``m`` iterations take, in
closed form,
``m (a + b n + c (P - K0)) + c n (m k + m (m - 1) / 2)``
with ``P`` the running prompts' tokens, ``K0`` the sum of their admission iterations
and ``k`` the current iteration. A worker therefore yields one SimPy event per batch
change, never one per decode iteration (why: a step of 10^5 iterations costs ~10^2
events). :func:`reference_generate` is the plain per-iteration loop this must equal.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable

import numpy as np
import simpy

from sim.cost import LinearCost

DISPATCH = ("round_robin", "least_loaded", "group")


@dataclass(frozen=True)
class EngineConfig:
    """Generation side of the simulated cluster."""

    n_workers: int = 1
    """Engine replicas (a tensor-parallel group counts as one worker)."""
    max_num_seqs: int = 256
    """vLLM ``max_num_seqs``: most sequences running at once on one worker."""
    dispatch: str = "group"
    """``round_robin`` (rollout i -> worker i mod W), ``least_loaded`` (fewest outstanding
    requests at submit) or ``group`` (a prompt's whole group on one worker, as vLLM does
    with ``n=G``; groups round-robin)."""
    prefix_caching: bool = True
    """Samples of one prompt on one worker share its prefill."""

    def __post_init__(self) -> None:
        if self.n_workers < 1 or self.max_num_seqs < 1:
            raise ValueError(f"EngineConfig: need n_workers >= 1 and max_num_seqs >= 1: {self}")
        if self.dispatch not in DISPATCH:
            raise ValueError(f"EngineConfig: dispatch must be one of {DISPATCH}, got {self.dispatch!r}")


class Batch:
    """A set of requests submitted together; its :attr:`done` event fires when the last
    one finishes. Arrays are indexed by request number ``0..n-1`` (row-major
    ``(prompt, sample)`` for a step's ``(n_prompts, G)`` lengths).

    ``on_finish(batch, i, t)`` (optional) is called at each completion, for pipelines
    that consume rollouts as they come.
    """

    def __init__(self, env: simpy.Environment, prompt_keys: np.ndarray, prompt_tokens: np.ndarray,
                 response_tokens: np.ndarray, on_finish: Callable | None = None):
        n = len(response_tokens)
        if not (len(prompt_keys) == len(prompt_tokens) == n) or n == 0:
            raise ValueError("Batch: prompt_keys, prompt_tokens, response_tokens must be "
                             "non-empty and of one length")
        if (np.asarray(response_tokens) < 1).any() or (np.asarray(prompt_tokens) < 0).any():
            raise ValueError("Batch: response_tokens must be >= 1 and prompt_tokens >= 0")
        self.prompt_keys = np.asarray(prompt_keys)
        self.prompt_tokens = np.asarray(prompt_tokens, dtype=np.int64)
        self.response_tokens = np.asarray(response_tokens, dtype=np.int64)
        self.worker = np.full(n, -1, dtype=np.int64)
        self.t_submit = np.full(n, np.nan)
        self.t_first_token = np.full(n, np.nan)
        self.t_finish = np.full(n, np.nan)
        self.remaining = n
        self.done = env.event()
        self.on_finish = on_finish

    def finish(self, i: int, t: float) -> None:
        self.t_finish[i] = t
        self.remaining -= 1
        if self.on_finish is not None:
            self.on_finish(self, i, t)
        if self.remaining == 0:
            self.done.succeed(self)


class Worker:
    """One continuous-batching engine replica (a SimPy process)."""

    def __init__(self, env: simpy.Environment, index: int, cost: LinearCost, config: EngineConfig):
        self.env, self.index, self.cost, self.config = env, index, cost, config
        self.waiting: list[tuple[Batch, int]] = []  # FIFO (append / index pointer)
        self._head = 0
        self.running: list[tuple[int, int, Batch, int]] = []  # heap (finish_k, seq, batch, i)
        self.k = 0  # iterations completed
        self.n = 0
        self.prompt_sum = 0  # P: prompt tokens of running sequences
        self.k0_sum = 0  # K0: sum of admission iterations of running sequences
        self._seq = 0
        self._cached: set = set()
        self._wakeup = env.event()
        self.busy_s = 0.0
        self.events = 0
        env.process(self.run())

    @property
    def outstanding(self) -> int:
        return self.n + len(self.waiting) - self._head

    def enqueue(self, batch: Batch, i: int) -> None:
        batch.worker[i] = self.index
        self.waiting.append((batch, i))
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    def _admit(self) -> float:
        """Admit waiting requests into free slots; return their prefill time (s)."""
        prefill_tokens = 0
        while self.n < self.config.max_num_seqs and self._head < len(self.waiting):
            batch, i = self.waiting[self._head]
            self._head += 1
            key = (id(batch), batch.prompt_keys[i])
            if not self.config.prefix_caching or key not in self._cached:
                prefill_tokens += int(batch.prompt_tokens[i])
                self._cached.add(key)
            heapq.heappush(self.running, (self.k + int(batch.response_tokens[i]), self._seq, batch, i))
            self._seq += 1
            self.n += 1
            self.prompt_sum += int(batch.prompt_tokens[i])
            self.k0_sum += self.k
            batch.t_first_token[i] = -1.0  # marked: set after this iteration's cost is known
        if self._head == len(self.waiting):
            self.waiting.clear()
            self._head = 0
        return self.cost.prefill_s(prefill_tokens)

    def advance_s(self, m: int) -> float:
        """Time (s) of the next ``m`` decode iterations with the batch as it is (closed form)."""
        c = self.cost
        per_iter = c.a_s + c.b_s * self.n + c.c_s * (self.prompt_sum - self.k0_sum)
        return m * per_iter + c.c_s * self.n * (m * self.k + m * (m - 1) / 2.0)

    def run(self):
        env = self.env
        while True:
            prefill_s = self._admit()
            if self.n == 0:
                self._wakeup = env.event()
                yield self._wakeup
                continue
            m = self.running[0][0] - self.k
            first_iter_s = self.advance_s(1) + prefill_s
            t_first = env.now + first_iter_s
            for _, _, batch, i in self.running:
                if batch.t_first_token[i] == -1.0:
                    batch.t_first_token[i] = t_first
            dt = self.advance_s(m) + prefill_s
            self.events += 1
            yield env.timeout(dt)
            self.busy_s += dt
            self.k += m
            while self.running and self.running[0][0] == self.k:
                _, _, batch, i = heapq.heappop(self.running)
                self.n -= 1
                self.prompt_sum -= int(batch.prompt_tokens[i])
                self.k0_sum -= self.k - int(batch.response_tokens[i])
                batch.finish(i, env.now)


class Engine:
    """W :class:`Worker` replicas and a dispatcher, inside one SimPy environment."""

    def __init__(self, env: simpy.Environment, cost: LinearCost, config: EngineConfig):
        self.env, self.cost, self.config = env, cost, config
        self.workers = [Worker(env, w, cost, config) for w in range(config.n_workers)]
        self._rr = 0

    def submit(self, prompt_keys, prompt_tokens, response_tokens,
               on_finish: Callable | None = None) -> Batch:
        """Submit requests now; returns their :class:`Batch` (wait on ``batch.done``)."""
        batch = Batch(self.env, prompt_keys, prompt_tokens, response_tokens, on_finish)
        batch.t_submit[:] = self.env.now
        for i, w in enumerate(self._assign(batch)):
            self.workers[w].enqueue(batch, i)
        return batch

    def _assign(self, batch: Batch) -> np.ndarray:
        W, n = self.config.n_workers, len(batch.response_tokens)
        if self.config.dispatch == "round_robin":
            out = (self._rr + np.arange(n)) % W
            self._rr = int((self._rr + n) % W)
            return out
        if self.config.dispatch == "group":
            _, group = np.unique(batch.prompt_keys, return_inverse=True)
            first = np.unique(group, return_index=True)[1]
            order = np.argsort(np.argsort(first))  # groups numbered by first appearance
            out = (self._rr + order[group]) % W
            self._rr = int((self._rr + len(first)) % W)
            return out
        load = np.array([wk.outstanding for wk in self.workers], dtype=np.int64)
        out = np.empty(n, dtype=np.int64)
        for i in range(n):
            w = int(np.argmin(load))
            out[i] = w
            load[w] += 1
        return out


def generate(lengths: np.ndarray, prompt_tokens: np.ndarray, cost: LinearCost,
             config: EngineConfig) -> Batch:
    """Simulate one synchronous generation phase from time 0.

    Args:
        lengths: ``(n_prompts, G)`` response lengths (tokens).
        prompt_tokens: ``(n_prompts,)`` prompt lengths (tokens).
    Returns: the finished :class:`Batch`; its arrays are flat ``(n_prompts * G,)``,
        row-major in ``(prompt, sample)``.
    """
    lengths = np.asarray(lengths)
    n_prompts, G = lengths.shape
    env = simpy.Environment()
    engine = Engine(env, cost, config)
    keys = np.repeat(np.arange(n_prompts), G)
    batch = engine.submit(keys, np.repeat(np.asarray(prompt_tokens), G), lengths.ravel())
    env.run(until=batch.done)
    return batch


def reference_generate(lengths: np.ndarray, prompt_tokens: np.ndarray, cost: LinearCost,
                       config: EngineConfig) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Plain per-iteration loop of the same engine, for tests and calibration.

    Returns ``(times, features)``: ``times`` has flat arrays ``worker, t_first_token,
    t_finish`` like :func:`generate`; ``features`` is ``(n_workers, 4)``: per worker the
    number of iterations, sum of running sequences, sum of context tokens and prefill
    tokens over its iterations, so that the worker's busy time is
    ``features @ [a_s, b_s, c_s, prefill_s_per_token]``. Only static dispatch
    (``round_robin``/``group``, or ``least_loaded`` at one submit) is modelled.
    """
    lengths = np.asarray(lengths)
    n_prompts, G = lengths.shape
    env = simpy.Environment()
    assign = Engine(env, LinearCost(0, 0, 0), config)._assign(
        Batch(env, np.repeat(np.arange(n_prompts), G), np.repeat(prompt_tokens, G), lengths.ravel()))
    flat_len = lengths.ravel()
    flat_prompt = np.repeat(np.asarray(prompt_tokens, dtype=np.int64), G)
    keys = np.repeat(np.arange(n_prompts), G)
    t_first = np.full(flat_len.size, np.nan)
    t_finish = np.full(flat_len.size, np.nan)
    features = np.zeros((config.n_workers, 4))
    coef = np.array([cost.a_s, cost.b_s, cost.c_s, cost.prefill_s_per_token])
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
