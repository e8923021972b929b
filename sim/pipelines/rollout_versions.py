"""Weights versions per token and would-be lengths of the asynchronous pipelines' rollouts.

The rollout table (:mod:`sim.trace.schema`, schema version 3) records per rollout:

- ``version_dispatch``: the generators' version ``v_gen`` when it was dispatched;
- ``version_first_token`` / ``version_last_token``: the version that made its first and
  its last token. A non-partial rollout finishes under the weights it started with (the
  modelling choice of :mod:`sim.pipelines.async_pipeline`), so both equal ``version_dispatch``; a
  partial rollout keeps running across weight syncs, so its first token is made by the
  version current at its admission and its last by the one current at its finish;
- ``stale_tokens``: tokens it made under a version older than ``version_last_token``
  (for a partial rollout: its tokens at the last weight sync it spanned; else 0);
- ``would_be_response_tokens``: the length it was drawn with, i.e. what it would have had
  if generated to the end; differs from ``response_tokens`` only for an aborted rollout
  (why: length-bias metrics compare consumed rollouts with *all* generated ones, issue
  "length bias incl. aborted", :func:`sim.trace.metrics.drop_bias`).

``policy_version`` keeps its meaning (the version that made the last token, hence
``version_last_token`` here; for a discarded partial group its oldest sample's).
"""

from __future__ import annotations

import bisect

import numpy as np
from rolloutlab.sim.pipelines.async_ledger import BatchInfo


class VersionClock:
    """The times the generators' version changed; the version that made a token at ``t``."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.versions: list[int] = [0]

    def change(self, t: float, v: int) -> None:
        """From time ``t`` (the end of a weight sync) the generators hold version ``v``."""
        self.times.append(t)
        self.versions.append(v)

    def at(self, t: np.ndarray) -> np.ndarray:
        """``(n,)`` version that made a token at times ``t`` (s): the latest version whose
        change time is strictly before ``t`` (a token at a change's very time was made
        before the workers stopped for that sync: a token takes a positive iteration time
        after the resumption)."""
        idx = [bisect.bisect_left(self.times, float(x)) for x in np.atleast_1d(t)]
        return np.asarray(self.versions, dtype=np.int64)[idx]


def record_progress(engine, info_of: dict[int, BatchInfo]) -> None:
    """At a weight sync (workers held at a boundary): store each running request's tokens
    so far in its batch info's ``stale_tokens`` (``info_of``: ``id(engine batch) ->``
    :class:`sim.pipelines.async_ledger.BatchInfo`); the value of the last sync a rollout spans is
    the number of its tokens made under an older version than its last token's."""
    running: dict[tuple[int, int], int] = {}
    for worker in engine.workers:
        for batch, i, tokens in worker.progress():
            running[(id(batch), i)] = tokens
            info = info_of.get(id(batch))
            if info is not None:
                info.stale_tokens[i] = tokens
    for info in info_of.values():  # rollouts run as segments (abort sync, chunks)
        so_far = getattr(info.batch, "tokens_so_far", None)
        if so_far is not None:
            done = so_far(running)
            live = (done > 0) & (done < info.batch.response_tokens)
            info.stale_tokens[live] = done[live]


def version_columns(
    info: BatchInfo, sl: slice, v_dispatch: int, partial: bool, clock: VersionClock
) -> dict[str, np.ndarray]:
    """The version-3 columns (module docstring) of rows ``sl`` of one batch (``info``, a
    :class:`sim.pipelines.async_ledger.BatchInfo`) dispatched at ``v_dispatch``; ``(G,)`` arrays."""
    b = info.batch
    n = sl.stop - sl.start
    disp = np.full(n, v_dispatch, dtype=np.int64)
    if partial:
        first = clock.at(b.t_first_token[sl])
        last = info.v_last[sl].copy()
        last = np.where(last >= 0, last, first)  # aborted before its end: no last token
        stale = info.stale_tokens[sl].copy()
    else:
        first, last, stale = disp, disp.copy(), np.zeros(n, dtype=np.int64)
    return {
        "would_be_response_tokens": b.response_tokens[sl].copy(),
        "version_dispatch": disp,
        "version_first_token": first,
        "version_last_token": last,
        "stale_tokens": stale,
    }
