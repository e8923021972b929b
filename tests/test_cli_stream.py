"""`rolloutlab sim` with the streaming pipeline, chunked partial rollouts and the
weight-sync modes: each runs on the bundled default scenario and writes the sync columns;
bad specs are refused in one line, exit 2, nothing written."""

from __future__ import annotations

import polars as pl
import pytest
from click.testing import CliRunner

from rolloutlab.cli import main
from tests.cli_helpers import assert_refused

MODES = (
    "async:2",
    "async:1:queue=32:full=block:threshold=0.5:sync_every=2",
    "partial:2:chunk=512",
    "bounded:2:sync=drain",
    "one-step-off:sync=abort",
)


def run_sim(out, *args):
    base = ["sim", "--steps", "2", "--controller", "static:4", "--out", str(out)]
    return CliRunner().invoke(main, base + list(args))


def test_every_mode_runs_on_the_default_scenario_with_the_sync_columns(tmp_path):
    out = tmp_path / "o"
    res = run_sim(out, "--pipeline", ",".join(MODES), "--sync-mode", "inflight")
    assert res.exit_code == 0, res.output
    assert pl.read_csv(out / "summary.csv")["pipeline"].to_list() == list(MODES)
    steps = pl.read_parquet(out / "steps.parquet")
    assert steps["run_id"].n_unique() == len(MODES)
    parts = steps.select("sync_pause_s", "sync_drain_s", "sync_transfer_s")
    assert parts.null_count().sum_horizontal()[0] == 0
    total = parts.sum_horizontal().to_numpy()
    assert abs(total - steps["sync_time"].to_numpy()).max() < 1e-9


def test_sync_mode_flag_applies_unless_the_spec_has_its_own(tmp_path):
    out = tmp_path / "o"
    res = run_sim(out, "--pipeline", "bounded:2,bounded:2:sync=abort", "--sync-mode", "drain")
    assert res.exit_code == 0, res.output
    names = ["bounded:2:sync=drain", "bounded:2:sync=abort"]
    assert pl.read_csv(out / "summary.csv")["pipeline"].to_list() == names
    steps = pl.read_parquet(out / "steps.parquet")
    drain = steps.filter(pl.col("run_id").str.ends_with("sync=drain"))["sync_drain_s"]
    assert drain.sum() > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--pipeline", "streaming:2"], "pipeline spec 'streaming:2'"),
        (["--pipeline", "async:2:colour=red"], "unknown option"),
        (["--pipeline", "partial:2:chunk=0"], "chunk must be >= 1"),
        (["--pipeline", "async:2:threshold=1.5"], "threshold must be in [0, 1]"),
        (["--pipeline", "async:2:queue=8", "--prompts", "16"], "queue capacity 8 is below"),
        (["--pipeline", "bounded:2", "--sync-mode", "sometimes"], "sometimes"),
        (
            ["--pipeline", "async:2", "--pass-rate", "fixed:0.5", "--dynamic-sampling"],
            "does not combine with an async:S",
        ),
    ],
)
def test_bad_stream_input_is_refused(tmp_path, args, message):
    out = tmp_path / "o"
    res = run_sim(out, *args)
    assert_refused(res, message, out)
    assert len([ln for ln in res.output.splitlines() if ln.strip()]) <= 3
