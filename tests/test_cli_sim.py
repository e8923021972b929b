"""CLI smoke tests of `rolloutlab sim` with tiny sizes."""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner

from rolloutlab.cli import main
from tests.cli_helpers import assert_refused, invoke_on
from tests.conftest import calibration_dict


def test_sim_writes_every_output(tmp_path, calibration_file):
    out = tmp_path / "out"
    res = CliRunner().invoke(
        main, ["sim", "--calibration", str(calibration_file), "--steps", "5", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    summary = pl.read_csv(out / "summary.csv")
    assert summary["controller"].to_list() == ["static:4", "static:8", "static:16", "sagc"]
    want = "controller steps wall_clock_s gen_time_s slot_idle_frac straggler_rate mean_G"
    assert {*want.split(), "rollouts", "tokens_per_s"} <= set(summary.columns)
    assert summary.filter(pl.col("controller") == "static:8")["rollouts"][0] == 5 * 4 * 8
    for name in ("rollouts.parquet", "steps.parquet", "comparison.png", "config.json"):
        assert (out / name).stat().st_size > 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["run"]["steps"] == 5 and cfg["versions"]["simpy"]
    assert "static:16" in res.output


def test_sim_no_figure_writes_the_tables_and_no_figure(tmp_path, calibration_file):
    out = tmp_path / "out"
    args = ["sim", "--calibration", str(calibration_file), "--steps", "3", "--no-figure"]
    res = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert not (out / "comparison.png").exists() and "comparison.png" not in res.output
    assert pl.read_csv(out / "summary.csv").height == 4


def test_sim_bad_calibration_version(tmp_path):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(calibration_dict(version=7)))
    res = CliRunner().invoke(
        main, ["sim", "--calibration", str(path), "--out", str(tmp_path / "o")]
    )
    assert res.exit_code != 0
    assert "cal.json: field 'version'" in res.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "defaults,field",
    [
        ({"steps": "abc"}, "defaults.steps"),
        ({"prompts": -5}, "defaults.prompts"),
        ({"tau": 0.5}, "defaults.tau"),
    ],
)
def test_sim_bad_scenario_defaults_name_the_field(tmp_path, defaults, field):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(calibration_dict(defaults=defaults)))
    res = CliRunner().invoke(
        main, ["sim", "--calibration", str(path), "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 2 and f"cal.json: field {field}" in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_sim_two_sagc_options_in_the_controller_list(tmp_path, calibration_file):
    res = invoke_on(
        "sim",
        calibration_file,
        tmp_path / "o",
        *("--steps", "2", "--controller", "static:4,sagc:tau=15,delta=0.2"),
    )
    assert res.exit_code == 0, res.output
    assert pl.read_csv(tmp_path / "o" / "summary.csv")["controller"].to_list() == [
        "static:4",
        "sagc:tau=15,delta=0.2",
    ]


def test_sim_lagc_and_sagc_floor_budget_specs(tmp_path, calibration_file):
    specs = ["lagc", "lagc:signal=variance,G_min=8", "sagc:G_min=8,step_time_budget_s=300"]
    args = ["sim", "--calibration", str(calibration_file), "--steps", "2", "--out"]
    res = CliRunner().invoke(main, [*args, str(tmp_path / "o"), "--controller", ",".join(specs)])
    assert res.exit_code == 0, res.output
    summary = pl.read_csv(tmp_path / "o" / "summary.csv")
    assert summary["controller"].to_list() == specs
    assert summary.filter(pl.col("controller") != "lagc")["mean_G"].min() >= 8
    res = CliRunner().invoke(main, [*args, str(tmp_path / "bad"), "--controller", "lagc:bogus=1"])
    assert (
        res.exit_code != 0 and "lagc:bogus=1" in res.output and "unknown LAGC option" in res.output
    )
    assert not (tmp_path / "bad").exists()


def test_sim_bad_controller_spec(tmp_path, calibration_file):
    out = tmp_path / "o"
    res = invoke_on(
        "sim", calibration_file, out, "--steps", "2", "--controller", "static:4,dynamic"
    )
    assert_refused(res, "dynamic", out)


@pytest.mark.parametrize(
    "pipeline", ["sync", "one-step-off", "interval:2", "bounded:1", "partial:2", "oversample:1.5"]
)
def test_sim_each_pipeline(tmp_path, calibration_file, pipeline):
    out = tmp_path / "out"
    args = ("--steps", "3", "--prompts", "2", "--controller", "static:4", "--pipeline", pipeline)
    res = invoke_on("sim", calibration_file, out, *args)
    assert res.exit_code == 0, res.output
    summary = pl.read_csv(out / "summary.csv")
    assert summary["pipeline"].to_list() == [pipeline]
    for col in (
        "learner_idle_frac",
        "generator_idle_frac",
        "staleness_mean",
        "staleness_max",
        "dropped",
    ):
        assert col in summary.columns
    assert summary["steps"][0] == 3


def test_sim_colocated_and_bad_pipeline(tmp_path, calibration_file):
    args = [
        "sim",
        "--calibration",
        str(calibration_file),
        "--steps",
        "2",
        "--controller",
        "static:2",
    ]
    res = CliRunner().invoke(
        main,
        args
        + [
            "--pipeline",
            "sync,bounded:2",
            "--placement",
            "colocated",
            "--out",
            str(tmp_path / "a"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert pl.read_csv(tmp_path / "a" / "summary.csv")["pipeline"].to_list() == [
        "sync",
        "bounded:2",
    ]
    res = CliRunner().invoke(main, args + ["--pipeline", "bounded", "--out", str(tmp_path / "b")])
    assert res.exit_code != 0 and "bounded" in res.output


def test_sim_fast_engine_and_roofline_options(tmp_path, calibration_file):
    out = tmp_path / "fast"
    fast = "--steps 4 --engine fast --model qwen2.5-3b --gpu h100 --no-kv-cache --drift r1zero"
    res = invoke_on(
        "sim",
        calibration_file,
        out,
        *fast.split(),
        *("--dataset-size", "8", "--controller", "static:4,sagc"),
    )
    assert res.exit_code == 0, res.output
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["engine_impl"] == "fast" and cfg["engine"]["kv_blocks"] is None
    assert cfg["lengths"]["kind"] == "GroupLengths" and cfg["lengths"]["quantiles"]["n"] == 1000
    assert cfg["cost"]["a_s"] == pytest.approx(0.0038, rel=0.05)  # roofline, not the file's
    out2 = tmp_path / "kv"
    kv = "--steps 2 --model llama-3.2-3b --gpu a100 --controller static:4"
    res = invoke_on("sim", calibration_file, out2, *kv.split())
    assert res.exit_code == 0, res.output
    assert json.loads((out2 / "config.json").read_text())["engine"]["kv_blocks"] > 1000


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--engine", "fast", "--model", "qwen2.5-3b", "--gpu", "h100"], "--no-kv-cache"),
        (
            ["--engine", "fast", "--model", "qwen2.5-3b", "--gpu", "h100", "--kv-cache"],
            "no KV cache model",
        ),
        (
            ["--engine", "fast", "--pipeline", "sync,one-step-off"],
            "one-step-off needs --engine simpy",
        ),
        (["--tp", "2"], "--tp needs --model"),
        (["--kv-cache"], "--kv-cache needs --model"),
        (["--controller", ""], "controllers: none given"),
        (["--pipeline", "bounded:x"], "S must be an integer"),
        (["--pipeline", "oversample:y"], "R must be a number"),
    ],
)
def test_sim_refuses_what_it_would_silently_ignore(tmp_path, calibration_file, extra, message):
    res = invoke_on("sim", calibration_file, tmp_path / "o", "--steps", "2", *extra)
    assert_refused(res, message, tmp_path / "o")
