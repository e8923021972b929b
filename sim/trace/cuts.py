"""What a tail cut removed, per learner step: the step table's ``cut_*`` columns.

Over-provisioning pipelines (``oversample:R``, ``groupover:N/K``, both at once:
:mod:`sim.pipelines.spec`) abort the slowest rollouts once a step has what it needs; the
trace keeps them as ``abort`` rows of the step that cut them, with the tokens made
(``response_tokens``) and, in the simulator, the length they would have had
(``would_be_response_tokens``). Per step this gives ``cut_rollouts`` (rows aborted),
``cut_tokens`` (tokens spent on them) and ``cut_len_bias``: the mean length trained on
over the mean would-be length of everything generated for the step (consumed + cut at
their would-be length; < 1: the cut favours short responses; the per-run form is
:func:`sim.trace.metrics.drop_bias`).
"""

from __future__ import annotations

import polars as pl

CUT_COLUMNS = ("cut_rollouts", "cut_tokens", "cut_len_bias")
"""Step-table columns filled by :func:`with_cut_columns` (nullable, :mod:`sim.trace.schema`)."""


def with_cut_columns(steps: pl.DataFrame, rollouts: pl.DataFrame) -> pl.DataFrame:
    """``steps`` with :data:`CUT_COLUMNS` from ``rollouts`` (trace schema; ``abort`` rows
    counted as cut, stale drops included). A step with nothing cut gets 0, 0 and 1.0
    when it trained on anything (NaN-free), null when it has no rollout row."""
    ab = pl.col("finish_reason") == "abort"
    would_be = pl.coalesce("would_be_response_tokens", "response_tokens").cast(pl.Float64)
    per = rollouts.group_by("step").agg(
        ab.sum().cast(pl.Int64).alias("cut_rollouts"),
        pl.col("response_tokens").filter(ab).sum().cast(pl.Int64).alias("cut_tokens"),
        (pl.col("response_tokens").filter(~ab).cast(pl.Float64).mean() / would_be.mean()).alias(
            "cut_len_bias"
        ),
    )
    return (
        steps.drop([c for c in CUT_COLUMNS if c in steps.columns])
        .join(per, on="step", how="left")
        .select([*steps.columns, *(c for c in CUT_COLUMNS if c not in steps.columns)])
    )
