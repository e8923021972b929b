"""calibration.validation.replay / ``compare replay``: a simulated run's controllers
replayed against the per-sample log (predicted against measured straggler rate and
length idle at the G each controller chose)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from rolloutlab.calibration.readers.grouped import GroupedDataError, read_grouped
from rolloutlab.calibration.validation.replay import length_idle, replay
from rolloutlab.sim.trace import schema

from rolloutlab.cli import main

REAL = Path(__file__).parent / "data" / "groups" / "real_sync"


def test_length_idle_by_hand():
    # lengths 1, 2, 3, 6: mean 3, max 6 -> half of the slot time idle
    assert length_idle(np.array([[[1, 2], [3, 6]]]))[0] == pytest.approx(0.5)
    assert length_idle(np.full((1, 2, 3), 7))[0] == 0.0


def test_a_run_replayed_against_its_own_log_agrees_exactly():
    """The real run's own rollouts as the 'simulated' run at its logged G = 8: every
    subsample at G = 8 of 8 is the whole step, so predicted and measured are equal."""
    trace = read_grouped([REAL])
    rollouts = schema.read(REAL / "rollouts.parquet", "rollouts")
    table = replay(trace, rollouts, (2.5, 3.0), draws=4)
    assert table["mean_G"].to_list() == [8.0, 8.0] and table["n_steps"].to_list() == [40, 40]
    assert table["abs_error"].max() == 0.0
    assert table["len_idle_pred"].to_list() == pytest.approx(table["len_idle_meas"].to_list())
    assert 0 < table["p_straggler_meas"].min() < 1


def test_a_group_above_the_logged_size_is_refused():
    trace = read_grouped([REAL])
    rollouts = schema.read(REAL / "rollouts.parquet", "rollouts")
    more = rollouts.with_columns(pl.col("sample_idx") % 4, pl.col("prompt_id") // 2)
    with pytest.raises(GroupedDataError, match=r"field 'step': logged step 0 has 0 groups of 16"):
        replay(trace, more, (3.0,), draws=2)


def test_replay_cli_writes_the_table(tmp_path):
    out = tmp_path / "r"
    r = CliRunner().invoke(
        main,
        ["compare", "replay", str(REAL), "--sim", str(REAL), "--tau", "3", "--draws", "2",
         "--out", str(out)],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    t = pl.read_csv(out / "replay.csv")
    assert t.height == 1 and t["abs_error"][0] == 0.0
