"""Bounded-memory rollout tables (sim.trace.stream, sim.trace.scan): a run streamed to
parquet and summarised from a lazy scan gives the numbers of the in-memory table."""

from __future__ import annotations

import math

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.pipelines.registry import simulate
from rolloutlab.sim.pipelines.spec import parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.trace.metrics import (
    pipeline_summary,
    run_summary,
    scan_step_metrics,
    step_metrics,
)
from rolloutlab.sim.trace.scan import step_chunks
from rolloutlab.sim.trace.schema import META_KEY, TraceError, read
from rolloutlab.sim.trace.stream import (
    ColumnSpool,
    RolloutSink,
    merge_parquet,
    streamed_rollouts,
)

from tests.test_async_pipeline import tiny


def _close(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, float) and math.isnan(x):
            assert isinstance(y, float) and math.isnan(y), k
        else:
            assert y == pytest.approx(x, rel=1e-12, abs=1e-12), k


@pytest.mark.parametrize("spec", ["sync", "bounded:2", "oversample:1.5", "async:1"])
def test_a_streamed_run_has_the_summaries_of_the_in_memory_one(spec, tmp_path):
    sc, cfg, pipe = tiny(), RunConfig(steps=6, prompts=4, seed=3), parse_pipeline(spec)
    mem = simulate(sc, StaticG(4), cfg, pipe)
    disk = simulate(sc, StaticG(4), cfg, pipe, rollout_path=tmp_path / "r.parquet")
    assert isinstance(disk.rollouts, pl.LazyFrame)
    assert_frame_equal(disk.rollouts.collect(), read(tmp_path / "r.parquet", "rollouts"))
    assert_frame_equal(disk.rollouts.collect(), mem.rollouts, check_dtypes=False)
    _close(run_summary(mem.rollouts, mem.steps), run_summary(disk.rollouts, disk.steps))
    W = sc.engine.n_workers
    _close(
        pipeline_summary(mem.rollouts, mem.steps, pipe.max_staleness, W),
        pipeline_summary(disk.rollouts, disk.steps, pipe.max_staleness, W),
    )


def test_the_fast_path_streams_the_same_table(tmp_path):
    sc, cfg = tiny(), RunConfig(steps=5, prompts=4, seed=1)
    mem = simulate(sc, StaticG(2), cfg, engine="fast")
    disk = simulate(sc, StaticG(2), cfg, engine="fast", rollout_path=tmp_path / "f.parquet")
    assert_frame_equal(disk.rollouts.collect(), mem.rollouts)


@settings(max_examples=15, deadline=None)
@given(max_rows=st.integers(1, 200), workers=st.integers(1, 5))
def test_step_chunks_cover_every_row_once_in_whole_steps(max_rows, workers):
    sc, cfg = tiny(), RunConfig(steps=7, prompts=3, seed=max_rows)
    rollouts = simulate(sc, StaticG(workers), cfg).rollouts
    chunks = list(step_chunks(rollouts.lazy(), max_rows))
    assert_frame_equal(pl.concat(chunks), rollouts)
    steps_seen = [set(c["step"].to_list()) for c in chunks]
    for a, b in zip(steps_seen, steps_seen[1:]):
        assert max(a) < min(b)  # whole steps, ascending
    for c in chunks:
        assert c.height <= max_rows or c["step"].n_unique() == 1
    assert_frame_equal(scan_step_metrics(rollouts.lazy()), step_metrics(rollouts))


def test_merge_keeps_rows_in_order_and_the_schema_version(tmp_path):
    sc = tiny()
    frames = [
        simulate(sc, StaticG(2), RunConfig(steps=3, prompts=2, seed=s, run_id=f"r{s}")).rollouts
        for s in range(3)
    ]
    parts = []
    for i, f in enumerate(frames):
        sink = RolloutSink(tmp_path / f"p{i}.parquet", row_group_rows=5)
        for k in range(0, f.height, 7):
            sink.add(f[k : k + 7])
        assert sink.close() is None
        parts.append(tmp_path / f"p{i}.parquet")
    merge_parquet(parts, tmp_path / "all.parquet")
    assert_frame_equal(read(tmp_path / "all.parquet", "rollouts"), pl.concat(frames))
    import pyarrow.parquet as pq

    assert META_KEY in pq.ParquetFile(tmp_path / "all.parquet").schema_arrow.metadata
    with pytest.raises(ValueError, match="no part files"):
        merge_parquet([], tmp_path / "none.parquet")


def test_an_invalid_row_is_refused_when_streamed_and_the_parts_folder_goes(tmp_path):
    bad = simulate(tiny(), StaticG(2), RunConfig(steps=2, prompts=2)).rollouts
    bad = bad.with_columns(pl.lit(-1).alias("response_tokens"))
    with pytest.raises(TraceError, match="response_tokens"):
        with streamed_rollouts(tmp_path) as parts:
            sink = RolloutSink(parts / "a.parquet")
            sink.add(bad)
            sink.close()
    assert not (tmp_path / ".rollout-parts").exists()
    assert not (tmp_path / "rollouts.parquet").exists()


@settings(max_examples=10, deadline=None)
@given(rows=st.integers(1, 40), block=st.integers(1, 9))
def test_a_column_spool_hands_rows_on_in_order_every_few_rows(rows, block, tmp_path_factory):
    table = simulate(tiny(), StaticG(2), RunConfig(steps=4, prompts=3)).rollouts
    path = tmp_path_factory.mktemp("spool") / "s.parquet"
    spool = ColumnSpool(RolloutSink(path, row_group_rows=7), _frames, rows=rows)
    for k in range(0, table.height, block):
        spool.append({c: table[c][k : k + block] for c in table.columns})
    assert spool.close() is None
    assert_frame_equal(read(path, "rollouts"), table)


def _frames(dicts: list[dict]) -> pl.DataFrame:
    return pl.concat([pl.DataFrame(d) for d in dicts])
