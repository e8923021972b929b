"""Reading a rollout table back in bounded pieces (a lazy :func:`polars.scan_parquet` of a
file written by :class:`sim.trace.stream.RolloutSink`, or any frame's ``.lazy()``).

Interface: :func:`step_chunks` (whole steps, at most about ``max_rows`` rows each),
:func:`worker_chunks` (one worker's rows at a time, in worker order) and
:func:`pipeline_counts` (one aggregation pass). :mod:`sim.trace.metrics` builds the run
summaries on them, so a 16 M-rollout run is summarised in the memory of a few steps.
Filters on ``step`` skip whole row groups (parquet statistics) when the file was written
in step order, as every simulator runner writes it.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

MAX_ROWS = 1 << 18
"""Rows read per piece by default: ~20 columns x 8 B x 2^18 = ~40 MiB at most."""


def step_chunks(lf: pl.LazyFrame, max_rows: int = MAX_ROWS) -> Iterator[pl.DataFrame]:
    """The rows of ``lf`` in pieces of consecutive whole steps (ascending), each about
    ``max_rows`` rows (one step may be larger). Rows keep their order within a piece.
    Yields nothing for an empty table. Raises ValueError for ``max_rows < 1``."""
    if max_rows < 1:
        raise ValueError(f"max_rows: must be >= 1, got {max_rows}")
    per_step = lf.group_by("step").agg(pl.len().alias("n")).sort("step").collect()  # small
    start, prev, rows = None, 0, 0
    for step, n in per_step.iter_rows():
        if start is not None and rows + n > max_rows:
            yield lf.filter(pl.col("step").is_between(start, prev)).collect()
            start, rows = None, 0
        start = step if start is None else start
        rows, prev = rows + n, step
    if start is not None:
        yield lf.filter(pl.col("step").is_between(start, prev)).collect()


def worker_chunks(
    lf: pl.LazyFrame, columns: tuple[str, ...], per_read: int = 16
) -> Iterator[tuple[int, pl.DataFrame]]:
    """``(worker, rows)`` for each worker of ``lf`` in ascending order, ``rows`` its
    ``columns`` in table order; ``per_read`` workers are read per pass over the table."""
    workers = lf.select(pl.col("worker").unique().sort()).collect()["worker"].to_list()
    for i in range(0, len(workers), per_read):
        batch = workers[i : i + per_read]
        part = lf.filter(pl.col("worker").is_in(batch)).select("worker", *columns).collect()
        by_worker = part.partition_by("worker", as_dict=True)
        for w in batch:
            yield w, by_worker[(w,)]


def pipeline_counts(lf: pl.LazyFrame, max_staleness: int) -> dict:
    """One pass over a rollout table: the consumed rows' staleness mean and max
    (``s_mean``, ``s_max``) and mean lags from dispatch and first token
    (``lag_dispatch``, ``lag_first_token``; ``policy_version`` standing in where those
    are null or absent), ``dropped`` (aborted and staler than ``max_staleness``),
    ``n_abort``, and the generated and consumed mean (would-be) lengths ``gen_mean``,
    ``cons_mean`` of :func:`sim.trace.metrics.drop_bias`. A mean over no row is None.
    Means of integers are exact, so they equal NumPy's on the same rows."""
    names = lf.collect_schema().names()
    ab = pl.col("finish_reason") == "abort"
    stale = pl.col("learner_version") - pl.col("policy_version")
    dropped = ab & (stale > max_staleness)
    known, length = pl.lit(False), pl.col("response_tokens")
    if "would_be_response_tokens" in names:
        known = pl.col("would_be_response_tokens").is_not_null()
        length = pl.col("would_be_response_tokens").fill_null(length)

    def lag(version: str) -> pl.Expr:
        v = pl.col("policy_version")
        v = pl.col(version).fill_null(v) if version in names else v
        return (pl.col("learner_version") - v).filter(~ab).mean()

    counts = lf.select(
        stale.filter(~ab).mean().alias("s_mean"),
        stale.filter(~ab).max().alias("s_max"),
        dropped.sum().alias("dropped"),
        ab.sum().alias("n_abort"),
        length.cast(pl.Float64).filter(~ab | dropped | known).mean().alias("gen_mean"),
        length.cast(pl.Float64).filter(~ab).mean().alias("cons_mean"),
        lag("version_dispatch").alias("lag_dispatch"),
        lag("version_first_token").alias("lag_first_token"),
    )
    return counts.collect().row(0, named=True)
