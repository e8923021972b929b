"""Trace schema: validation errors name file, row and column; round trips; streaming."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.pipelines.sync import RunConfig, run_sync
from rolloutlab.sim.trace import jsonl as trace_jsonl
from rolloutlab.sim.trace import schema as trace


@pytest.fixture
def tables(tiny_scenario):
    return run_sync(tiny_scenario, StaticG(3), RunConfig(steps=3, prompts=2, run_id="t"))


def test_parquet_round_trip(tmp_path, tables):
    rollouts, steps = tables
    trace.write_parquet(rollouts, tmp_path / "r.parquet", "rollouts")
    trace.write_parquet(steps, tmp_path / "s.parquet", "steps")
    assert trace.read(tmp_path / "r.parquet", "rollouts").equals(rollouts)
    assert trace.read(tmp_path / "s.parquet", "steps").equals(steps)
    meta = pq.read_schema(tmp_path / "r.parquet").metadata
    assert meta[trace.META_KEY] == str(trace.SCHEMA_VERSION).encode()


@pytest.mark.parametrize(
    "column,value,message",
    [
        ("response_tokens", -1, "row 2, column 'response_tokens'"),
        ("t_finish", -0.5, "row 2, column 't_finish'"),
        ("finish_reason", "eos", "row 2, column 'finish_reason'"),
        ("sample_idx", 99, "row 2, column 'sample_idx'"),
    ],
)
def test_bad_rollout_rows_are_named(tables, column, value, message):
    rollouts, _ = tables
    bad = rollouts.with_columns(
        pl.when(pl.int_range(pl.len()) == 2)
        .then(pl.lit(value))
        .otherwise(pl.col(column))
        .alias(column)
    )
    with pytest.raises(trace.TraceError, match=f"myfile.parquet: {message}"):
        trace.validate(bad, "rollouts", "myfile.parquet")


def test_finish_before_submit_is_an_error(tables):
    rollouts, _ = tables
    bad = rollouts.with_columns((pl.col("t_submit") + 1e6).alias("t_submit"))
    with pytest.raises(trace.TraceError, match="row 0, column 't_finish'.*before t_submit"):
        trace.validate(bad, "rollouts", "f")


def test_missing_column_is_an_error(tables):
    with pytest.raises(trace.TraceError, match=r"missing column\(s\) \['worker'\]"):
        trace.validate(tables[0].drop("worker"), "rollouts", "f")


def test_other_schema_version_is_refused(tmp_path, tables):
    path = tmp_path / "r.parquet"
    table = tables[0].to_arrow().replace_schema_metadata({trace.META_KEY: b"99"})
    pq.write_table(table, path)
    with pytest.raises(trace.TraceError, match="schema version 99"):
        trace.read(path, "rollouts")


def test_jsonl_bad_line_is_named(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\n{not json\n')
    with pytest.raises(trace.TraceError, match="r.jsonl: line 2: not valid JSON"):
        trace.read(path, "rollouts")


def test_writer_streams_each_step_and_resume_truncates(tmp_path, tables):
    rollouts, steps = tables
    w = trace_jsonl.TraceWriter(tmp_path, stream=True)
    for t in range(3):
        w.append_step(rollouts.filter(pl.col("step") == t), steps.filter(pl.col("step") == t))
        # readable after every step, before close: a dead run keeps what it finished
        assert trace.read(tmp_path / "steps.jsonl", "steps").height == t + 1
    with open(tmp_path / "rollouts.jsonl", "a") as fh:
        fh.write('{"run_id": "t", "step": 3, "prompt')  # torn line of a killed run
    trace_jsonl.truncate_jsonl(tmp_path / "rollouts.jsonl", keep_steps=2)
    trace_jsonl.truncate_jsonl(tmp_path / "steps.jsonl", keep_steps=2)
    r, s = w.close()
    assert s["step"].to_list() == [0, 1]
    assert sorted(r["step"].unique().to_list()) == [0, 1]
    assert r.height == rollouts.filter(pl.col("step") < 2).height
    assert (tmp_path / "rollouts.parquet").exists()


def test_step_table_controller_state_is_json(tables):
    _, steps = tables
    state = json.loads(steps["controller_state"][0])
    assert state == {"kind": "static", "G": 3, "steps_observed": 1}
    assert np.all(np.diff(steps["t_start"].to_numpy()) > 0)
