"""A set of generation requests submitted together, and what happened to each one."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import simpy

_SERIALS = itertools.count()


class Batch:
    """A set of requests submitted together; its :attr:`done` event fires when the last
    one finishes. Arrays are indexed by request number ``0..n-1`` (row-major
    ``(prompt, sample)`` for a step's ``(n_prompts, G)`` lengths).

    ``on_finish(batch, i, t)`` (optional) is called at each completion, for pipelines
    that consume rollouts as they come. ``exclusive=True`` is the submitter's promise
    that nothing else is submitted to the engine before this batch is done (the
    synchronous pipeline); workers then run their whole share in closed form and
    yield one event each (why: a synchronous step costs W events, not one per
    completion).
    """

    def __init__(
        self,
        env: simpy.Environment,
        prompt_keys: np.ndarray,
        prompt_tokens: np.ndarray,
        response_tokens: np.ndarray,
        on_finish: Callable | None = None,
        exclusive: bool = False,
    ):
        n = len(response_tokens)
        self.serial = next(_SERIALS)
        """Number of this batch, unique in the process (never reused, unlike ``id(batch)``):
        workers key their prefix caches by ``(serial, prompt key)`` (why: a key with
        ``id(batch)`` hit a freed batch's entry once CPython reused its address, and a
        recurring prompt id (``dataset_size``) then prefilled nothing)."""
        if not (len(prompt_keys) == len(prompt_tokens) == n) or n == 0:
            raise ValueError(
                "Batch: prompt_keys, prompt_tokens, response_tokens must be "
                "non-empty and of one length"
            )
        if (np.asarray(response_tokens) < 1).any() or (np.asarray(prompt_tokens) < 0).any():
            raise ValueError("Batch: response_tokens must be >= 1 and prompt_tokens >= 0")
        self.prompt_keys = np.asarray(prompt_keys)
        self.prompt_tokens = np.asarray(prompt_tokens, dtype=np.int64)
        self.response_tokens = np.asarray(response_tokens, dtype=np.int64)
        # plain lists for the hot loops (why: list indexing is ~5x cheaper than numpy's)
        self.keys_ = self.prompt_keys.tolist()
        self.prompt_ = self.prompt_tokens.tolist()
        self.resp_ = self.response_tokens.tolist()
        self.prefill_ = self.prompt_
        """Tokens a request prefills on a prefix-cache miss of its prompt key: its whole
        prompt, except for a later turn of a multi-turn rollout (:mod:`sim.engine.turns`),
        whose earlier context the worker still caches."""
        self.first_ = np.full(n, np.nan)
        self.finish_ = np.full(n, np.nan)
        self.worker = np.full(n, -1, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)  # times each request was preempted
        self.t_submit = np.full(n, np.nan)
        self.remaining = n
        self.aborted = np.zeros(n, dtype=bool)  # set by Engine.abort once the request is gone
        self.abort_tokens = np.zeros(n, dtype=np.int64)  # tokens generated before the abort
        self.step = 0  # learner step of the requests (per-step engine draws: speculation)
        self.spec_steps = np.zeros(n, dtype=np.int64)  # verify steps (speculative decoding)
        self.spec_drawn = np.zeros(n, dtype=np.int64)  # tokens those steps emitted, uncut
        self.done = env.event()
        self.on_finish = on_finish
        self.coalesce = exclusive and on_finish is None

    @property
    def t_first_token(self) -> np.ndarray:
        """``(n,)`` time of each request's first token (s)."""
        return self.first_

    @property
    def t_finish(self) -> np.ndarray:
        """``(n,)`` time each request finished (s); NaN while running."""
        return self.finish_

    def finished(self, i: int, t: float) -> None:
        """Record request ``i`` finished at ``t`` (now); fire :attr:`done` after the last."""
        self.finish_[i] = t
        self.remaining -= 1
        if self.on_finish is not None:
            self.on_finish(self, i, t)
        if self.remaining == 0:
            self.done.succeed(self)

    def record_abort(self, i: int, t: float, tokens: int) -> None:
        """Record request ``i`` aborted at ``t`` after ``tokens`` generated tokens (0 if it
        was never admitted; its first-token time is then ``t``); fire :attr:`done` after
        the last request. ``on_finish`` is not called."""
        self.aborted[i] = True
        self.abort_tokens[i] = tokens
        self.finish_[i] = t
        if np.isnan(self.first_[i]) or self.first_[i] > t:
            self.first_[i] = t
        self.remaining -= 1
        if self.remaining == 0:
            self.done.succeed(self)
