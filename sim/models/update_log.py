"""Per-update record of a run's learning model: one row per optimizer update.

With ``--updates-per-batch K`` a learner step makes K updates, one per mini-batch of
``B / K`` prompts (:meth:`sim.models.rewards.RewardTracker.learn`); mini-batch ``j``
(0-based) trains on rollouts ``s`` versions old with a policy ``j`` updates further on, so
its staleness span is ``s + j + 1`` (:func:`sim.models.staleness.safe_span_eta`). The step
table keeps one row per step; this log keeps the updates (``updates.parquet``, written by
``rolloutlab sim`` when K > 1, docs/learning.md "Several updates per batch") and the
step of the collapse (the summary's ``t_collapse``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

UPDATE_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String,
    "step": pl.Int64,  # learner step, 0-based (the step table's `step`)
    "update": pl.Int64,  # j, 0-based index of the mini-batch within the step
    "prompts": pl.Int64,  # groups trained in this update
    "span_min": pl.Int64,  # min over its groups of s + j + 1 (updates since generation)
    "span_max": pl.Int64,  # max over its groups of s + j + 1
    "drive": pl.Float64,  # logit shift this update applied (LearningModel.apply_signal)
    "theta": pl.Float64,  # logit shift after it
    "collapsed": pl.Boolean,  # a collapse condition has fired by the end of this update
}
"""Columns of ``updates.parquet`` (one row per optimizer update)."""


@dataclass
class UpdateLog:
    """Rows of :data:`UPDATE_SCHEMA` (without ``run_id``) as a run's tracker appends them,
    and ``t_collapse`` (1-based learner step of the collapse, None while stable)."""

    rows: list[dict] = field(default_factory=list)
    t_collapse: int | None = None

    def record(self, step: int, j: int, staleness: np.ndarray, drive: float, model) -> None:
        """Append update ``j`` of learner ``step`` (0-based) over groups of ``staleness``
        (n,) versions; ``drive`` (logit units) and ``model`` (the
        :class:`~sim.models.learning.LearningModel` after the update)."""
        span = np.asarray(staleness, float) + j + 1  # (n,)
        self.rows.append(
            {
                "step": int(step),
                "update": int(j),
                "prompts": int(span.size),
                "span_min": int(span.min()) if span.size else None,
                "span_max": int(span.max()) if span.size else None,
                "drive": float(drive),
                "theta": float(model.theta),
                "collapsed": bool(model.collapsed),
            }
        )
        self.t_collapse = model.t_collapse

    def table(self, run_id: str) -> pl.DataFrame:
        """The rows as a :data:`UPDATE_SCHEMA` frame, ``run_id`` filled in."""
        return pl.DataFrame([{"run_id": run_id, **r} for r in self.rows], schema=UPDATE_SCHEMA)
