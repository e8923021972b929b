"""Tail batching's long round (RollPacker): which prompts a batch dispatches.

The batch-serial pipelines (:mod:`sim.pipelines.async_pipeline`) take prompt ids from a
stream ``0, 1, 2, ...`` (modulo ``dataset_size`` when set: prompts recur every epoch).
``oversample:R`` adds a *long round*: a queue of prompts run together, ``B`` at a time, as
a batch of their own once ``B`` are waiting. Two ways in:

- ``--park``: a prompt the tail cut left unfinished (:meth:`LongRound.park`);
- ``route=F``: a prompt *predicted* long, routed there instead of into its regular batch.
  Prediction from earlier rollouts only: a running mean of the lengths of the prompt's
  finished rollouts (:meth:`LongRound.observe`; a cut rollout's length is unknown and is
  not counted). A prompt is routed when that mean exceeds ``F`` times the mean length of
  every finished rollout seen so far (RollPacker, NSDI'26, sends long prompts to a
  dedicated long round: /work/shared/FIELD.md; the predictor is this project's). A prompt never seen
  finishing, or already waiting in the long round, is never routed; a batch routes at
  most as many prompts as it holds (so a dispatch always ends).

Every routing decision is kept (:attr:`LongRound.events`) and reported per learner step in
the step table (:func:`LongRound.annotate`): ``routed_prompts`` and ``route_reason``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import polars as pl

ROUTE_COLUMNS = ("routed_prompts", "route_reason")
"""Step-table columns filled by :meth:`LongRound.annotate` (nullable, :mod:`sim.trace.schema`)."""


@dataclass(frozen=True)
class Routed:
    """One prompt routed to the long round at dispatch time ``t`` (s): its earlier
    finished rollouts' count ``n`` and mean length ``mean`` (tokens), and the threshold
    ``F x`` (mean of every finished rollout) it exceeded (tokens)."""

    t: float
    prompt_id: int
    n: int
    mean: float
    threshold: float


@dataclass
class LongRound:
    """Prompt ids for each batch, with the long round (module doc).

    ``B``: prompts per learner step (a long-round batch holds ``B``); ``route``: ``F``
    (>= 1) or ``None`` (no routing); ``dataset_size``: ids modulo it, or ``None``."""

    B: int
    route: float | None = None
    dataset_size: int | None = None
    queue: list[int] = field(default_factory=list)
    events: list[Routed] = field(default_factory=list)
    _next: int = 0
    _n: dict[int, int] = field(default_factory=dict)
    _sum: dict[int, float] = field(default_factory=dict)
    _tokens: float = 0.0
    _count: int = 0

    def park(self, prompt_id: int) -> None:
        """Queue a prompt the tail cut left unfinished (``--park``), unless it is waiting
        already (a recurring prompt cut twice runs once in the long round)."""
        if int(prompt_id) not in self.queue:
            self.queue.append(int(prompt_id))

    def observe(self, prompt_id: int, length: int) -> None:
        """A rollout of ``prompt_id`` finished with ``length`` response tokens."""
        pid = int(prompt_id)
        self._n[pid] = self._n.get(pid, 0) + 1
        self._sum[pid] = self._sum.get(pid, 0.0) + float(length)
        self._tokens += float(length)
        self._count += 1

    def next_ids(self, n_prompts: int, t: float) -> tuple[np.ndarray, int]:
        """``((n,) int64 prompt ids, n)`` of the next batch dispatched at time ``t``: the
        long round's first ``B`` prompts when ``B`` wait, else ``n_prompts`` from the
        stream with the ones predicted long routed to the long round instead. Raises
        ValueError when ``n_prompts`` exceeds ``dataset_size`` (a prompt twice in a batch)."""
        if self.dataset_size is not None and n_prompts > self.dataset_size:
            raise ValueError(
                f"--dataset-size {self.dataset_size} is below the {n_prompts} prompts a batch "
                "dispatches (oversample:R launches ceil(R B))"
            )
        if len(self.queue) >= self.B:
            head, self.queue = self.queue[: self.B], self.queue[self.B :]
            return np.array(head, dtype=np.int64), self.B
        ids: list[int] = []
        routed = 0
        while len(ids) < n_prompts:
            pid = self._next % self.dataset_size if self.dataset_size else self._next
            self._next += 1
            if routed < n_prompts and self._route(pid, t):
                routed += 1
            else:
                ids.append(pid)
        return np.array(ids, dtype=np.int64), n_prompts

    def _route(self, pid: int, t: float) -> bool:
        if self.route is None or pid not in self._n or pid in self.queue:
            return False
        mean, threshold = self._sum[pid] / self._n[pid], self.route * self._tokens / self._count
        if mean <= threshold:
            return False
        self.queue.append(pid)
        self.events.append(Routed(t, pid, self._n[pid], mean, threshold))
        return True

    def annotate(self, steps: pl.DataFrame) -> pl.DataFrame:
        """``steps`` (step table, ``t_end`` ascending) with :data:`ROUTE_COLUMNS` when
        routing is on (else unchanged): prompts routed while step ``t`` ran (dispatch time
        in ``(t_end[t-1], t_end[t]]``) and why, JSON ``{"F", "prompts": [{"id", "n",
        "mean", "threshold"}]}`` (null when none); routings after the last step are not
        in the table."""
        if self.route is None or steps.height == 0:
            return steps
        t_end = steps["t_end"].to_numpy()
        per: list[list[Routed]] = [[] for _ in range(steps.height)]
        for e in self.events:
            k = int(np.searchsorted(t_end, e.t, side="left"))
            if k < steps.height:
                per[k].append(e)
        reasons = [
            json.dumps(
                {
                    "F": self.route,
                    "prompts": [
                        {"id": e.prompt_id, "n": e.n, "mean": e.mean, "threshold": e.threshold}
                        for e in es
                    ],
                }
            )
            if es
            else None
            for es in per
        ]
        return steps.with_columns(
            pl.Series("routed_prompts", [len(es) for es in per], dtype=pl.Int64),
            pl.Series("route_reason", reasons, dtype=pl.String),
        )
