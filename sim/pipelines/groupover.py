"""Over-sampling inside a group (``groupover:N/K``): launch N samples of a prompt, keep
the first K to finish, abort the rest (the tail-abort of RollPacker and APRIL applied to
a group's responses; FIELD.md).

A group of :mod:`sim.pipelines.async_pipeline` spans ``W = ceil(G N / K)`` requests of its batch
(``G`` the controller's proposal; ``W = N`` when ``G = K``) and is complete once ``G`` of
them finished (:attr:`sim.pipelines.async_ledger.GroupState.kept`, in finishing order); the others
are aborted then. Those *extras* are written to the rollout table as ``abort`` rows of
the step that consumed the group (``response_tokens`` = tokens made, the would-be length
in ``would_be_response_tokens``), so the length-bias metric sees what the cut cost
(:func:`sim.trace.metrics.drop_bias`). ``group_size`` in the table is ``W`` (samples launched;
``sample_idx`` runs over them); the learner trains on the ``G`` kept ones.
"""

from __future__ import annotations

import numpy as np
from rolloutlab.sim.pipelines.async_ledger import BatchInfo, GroupState


def kept_index(g: GroupState) -> np.ndarray:
    """``(G,)`` request indices (in its batch) of the samples group ``g`` trains on: the
    first ``keep`` to finish for a trimmed group, else all ``lo .. lo + width - 1``."""
    if g.trimmed:
        return np.asarray(g.kept, dtype=np.int64)
    return np.arange(g.lo, g.lo + g.G, dtype=np.int64)


def kept_mask(g: GroupState) -> np.ndarray:
    """``(width,)`` bool: which of the group's requests are kept (row order)."""
    mask = np.zeros(g.G, dtype=bool)
    mask[kept_index(g) - g.lo] = True
    return mask


def trim(engine, info: BatchInfo, g: GroupState) -> None:
    """Group ``g`` has its ``keep`` samples: abort its other requests still running."""
    b = info.batch
    pending = [i for i in range(g.lo, g.lo + g.G) if np.isnan(b.t_finish[i])]
    if pending:
        engine.abort(b, pending)


def extra_rows(
    groups: list[GroupState], batches: list[BatchInfo], columns_of, ledger
) -> list[dict[str, np.ndarray]]:
    """At the end of a run: the abort rows of consumed trimmed groups' extras that are
    gone from the engine (``columns_of(group, step, "aborted")`` gives the group's
    columns), counted in ``ledger.aborted``; extras still being removed count as
    ``in_flight``; a trimmed group still waiting in the buffer counts its extras too."""
    rows = []
    for g in groups:
        if not g.trimmed or g.status not in ("consumed", "ready"):
            continue
        b, sl = batches[g.j].batch, slice(g.lo, g.lo + g.G)
        extra = ~kept_mask(g)
        done = extra & ~np.isnan(b.t_finish[sl])
        ledger.aborted += int(done.sum())
        ledger.in_flight += int((extra & ~done).sum())
        if g.status == "consumed" and done.any():
            cols = columns_of(g, g.step, "aborted")
            rows.append({k: v[done] for k, v in cols.items()})
    return rows
