"""Output directories: a command never mixes its results into another run's folder."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rolloutlab.cli import main
from rolloutlab.commands.options.common import OutDirError, claim_out_dir


def test_claim_new_empty_and_same_command(tmp_path):
    d = claim_out_dir(tmp_path / "a", "sim")
    assert d.is_dir()
    (d / "config.json").write_text(json.dumps({"command": "sim"}))
    (d / "summary.csv").write_text("x\n")
    assert claim_out_dir(d, "sim") == d  # rerunning the same command replaces its results


@pytest.mark.parametrize("config", [{"command": "stability"}, {"controller": "sagc"}, None])
def test_claim_refuses_another_run(tmp_path, config):
    d = tmp_path / "run"
    d.mkdir()
    (d / "rollouts.jsonl").write_text("{}\n")
    if config is not None:
        (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(OutDirError, match=f"{d}: already holds"):
        claim_out_dir(d, "sim")
    assert sorted(p.name for p in d.iterdir()) == sorted(
        ["rollouts.jsonl"] + (["config.json"] if config is not None else [])
    )


def test_sim_and_stability_refuse_each_others_dirs(tmp_path, calibration_file):
    out = tmp_path / "o"
    run = CliRunner().invoke(
        main,
        [
            "stability",
            "--S",
            "1,2",
            "--lr",
            "0.01",
            "--steps",
            "20",
            "--seeds",
            "1",
            "--out",
            str(out),
        ],
    )
    assert run.exit_code == 0, run.output
    before = (out / "config.json").read_text()
    res = CliRunner().invoke(
        main, ["sim", "--calibration", str(calibration_file), "--steps", "2", "--out", str(out)]
    )
    assert res.exit_code != 0 and "already holds the results of `stability`" in res.output
    assert (out / "config.json").read_text() == before


@pytest.mark.parametrize(
    "args",
    [
        ["sim", "--steps", "2", "--prompts", "2", "--out", "{f}/sim"],
        ["calibrate", "pass-rate", "tests/data/qwen25_math_cot_100/scores.jsonl",
         "--lengths-field", "response_chars", "--out", "{f}/x.json"],
        ["compare", "learning-budget", "--draws", "1", "--budgets", "64",
         "--group-size", "2", "--out", "{f}/lb"],
        ["compare", "horizon", "--real", "results/real_stability_full", "--bootstrap", "0",
         "--out", "{f}/hz"],
    ],
)  # fmt: skip
def test_an_out_that_cannot_be_created_is_one_line_exit_2(tmp_path, args):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    res = CliRunner().invoke(main, [a.format(f=blocker) for a in args])
    assert res.exit_code == 2, res.output
    assert res.output.strip().startswith("Error:") and len(res.output.strip().splitlines()) == 1
    assert str(blocker) in res.output and blocker.read_text() == "not a folder"


def test_learning_budget_claims_its_folder_and_refuses_a_foreign_one(tmp_path):
    args = ["compare", "learning-budget", "--draws", "1", "--budgets", "64", "--group-size", "2"]
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "lb")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "lb" / "config.json").read_text())["kind"] == (
        "compare-learning-budget"
    )
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "rollouts.parquet").write_text("someone else's")
    res = CliRunner().invoke(main, [*args, "--out", str(foreign)])
    assert res.exit_code == 2 and "other files" in res.output
    assert sorted(p.name for p in foreign.iterdir()) == ["rollouts.parquet"]
