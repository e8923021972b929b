"""``rolloutlab sim --dispatch / --park / --pipeline groupover:N/K``: runs and refusals."""

from __future__ import annotations

import polars as pl
import pytest
from rolloutlab.sim.trace import schema as trace

from tests.cli_helpers import assert_refused, invoke_on


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dispatch", "nope"], "dispatch 'nope'"),
        (["--dispatch", "deferred:0"], "T must be an integer >= 1"),
        (["--dispatch", "deferred:-3"], "T must be an integer >= 1"),
        (["--pipeline", "groupover:4/8"], "need 1 <= K <= N"),
        (["--pipeline", "groupover:4/0"], "need 1 <= K <= N"),
        (["--pipeline", "sync,oversample:1.5", "--park"], "--park: pipeline sync"),
        (["--dispatch", "shared", "--engine", "fast"], "need --engine simpy"),
    ],
)
def test_bad_dispatch_and_pipeline_options_are_refused(tmp_path, calibration_file, args, message):
    out = tmp_path / "out"
    assert_refused(invoke_on("sim", calibration_file, out, "--steps", "2", *args), message, out)


def test_new_modes_run_and_fill_the_version_columns(tmp_path, calibration_file):
    out = tmp_path / "out"
    res = invoke_on(
        "sim",
        calibration_file,
        out,
        "--steps",
        "3",
        "--controller",
        "static:4",
        "--dispatch",
        "deferred:2",
        "--pipeline",
        "partial:1,groupover:6/4",
    )
    assert res.exit_code == 0, res.output
    rollouts = trace.read(out / "rollouts.parquet", "rollouts")
    for col in trace.V3_COLUMNS["rollouts"]:
        assert rollouts[col].null_count() == 0
    summary = pl.read_csv(out / "summary.csv")
    assert summary["pipeline"].to_list() == ["partial:1", "groupover:6/4"]
    assert {"staleness_dispatch_mean", "staleness_first_token_mean"} <= set(summary.columns)
