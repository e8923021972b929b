"""``rolloutlab calibrate`` / ``validate`` end to end on the bundled real sample, and bad input."""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner
from rolloutlab.sim.scenario.scenario import CalibrationError, load_scenario

from rolloutlab.cli import main
from tests.calib_helpers import SAMPLE_RUN, verl_row, write_events


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_calibrate_verl_tb_writes_a_loadable_scenario(tmp_path):
    out = tmp_path / "cal.json"
    r = _run(
        "calibrate",
        "verl-tb",
        SAMPLE_RUN,
        "--out",
        out,
        "--prompts",
        32,
        "--workers",
        1,
        "--tau",
        2.8,
        "--draws",
        1,
    )
    assert r.exit_code == 0, r.output
    sc = load_scenario(out)
    assert sc.defaults == {"prompts": 32, "tau": 2.8} and sc.engine.n_workers == 1
    d = json.loads(out.read_text())
    assert d["provenance"]["sources"][0]["sha256"] and d["fit"]["steps_used"] == 104
    assert 5.3 < d["lengths"]["mu"] < 5.7 and d["fit"]["decode"]["mape"] < 0.1


def test_validate_verl_tb_writes_one_row_per_run(tmp_path):
    r = _run("compare", "verl-tb", SAMPLE_RUN, "--fit-steps", 100, "--draws", 1, "--out", tmp_path)
    assert r.exit_code == 0, r.output
    t = pl.read_csv(tmp_path / "validation.csv")
    assert t.columns == [
        "run",
        "fit_steps",
        "test_steps",
        "mape_sim",
        "mape_constant",
        "mape_persistence",
        "mape_previous_step",
        "mape_linear",
    ]
    assert t.row(0)[:3] == ("q3b_fsdp_base", 100, 4) and 0 <= t["mape_sim"][0] < 0.2


def test_corrupt_input_fails_cleanly_without_output(tmp_path):
    bad = tmp_path / "run"
    bad.mkdir()
    src = next(SAMPLE_RUN.glob("events.*")).read_bytes()
    (bad / "events.out.tfevents.1").write_bytes(src[:3000])
    out = tmp_path / "cal.json"
    r = _run("calibrate", "verl-tb", bad, "--out", out)
    assert r.exit_code == 2 and "events.out.tfevents.1" in r.output and "corrupt" in r.output
    assert not out.exists()


def test_nan_value_fails_validate_naming_tag_and_step(tmp_path):
    rows = {s: verl_row(s) for s in range(1, 8)}
    rows[5] = verl_row(5, timing_s__gen=float("nan"))
    write_events(tmp_path / "run", rows)
    r = _run("compare", "verl-tb", tmp_path / "run", "--fit-steps", 3, "--out", tmp_path / "v")
    assert r.exit_code == 2 and "'timing_s/gen' at step 5" in r.output
    assert not (tmp_path / "v" / "validation.csv").exists()


def test_wrong_calibration_version_names_file_and_field(tmp_path):
    out = tmp_path / "cal.json"
    assert _run("calibrate", "verl-tb", SAMPLE_RUN, "--out", out, "--draws", 1).exit_code == 0
    d = json.loads(out.read_text())
    d["version"] = 99
    out.write_text(json.dumps(d))
    with pytest.raises(CalibrationError, match=r"cal.json: field 'version'"):
        load_scenario(out)
