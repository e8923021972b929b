"""CLI smoke tests of the reward and dynamic-sampling options of `rolloutlab sim` / `sweep`."""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner

from rolloutlab.cli import main
from tests.conftest import calibration_dict

LEARNING = ["informative_frac", "final_reward", "time_to_target_s"]
DYNAMIC = ["gen_rounds_mean", "dynamic_sampling_abort_frac", "wasted_rollout_s"]


def _sim(tmp_path, calibration_file, *args, cmd="sim"):
    out = tmp_path / "out"
    base = [cmd, "--calibration", str(calibration_file), "--steps", "12", "--out", str(out)]
    if cmd == "sweep":
        base += ["--seeds", "1"]
    return CliRunner().invoke(main, [*base, *args]), out


def test_every_option_runs(tmp_path, calibration_file):
    res, out = _sim(
        tmp_path,
        calibration_file,
        "--controller",
        "static:2,static:8",
        "--pass-rate",
        "beta:0.6,1.4",
        "--dynamic-sampling",
        "--gen-batch-factor",
        "1.5",
        "--max-gen-batches",
        "3",
        "--refill",
        "missing",
        "--target-reward",
        "0.2",
    )
    assert res.exit_code == 0, res.output
    summary = pl.read_csv(out / "summary.csv")
    assert summary.columns[-7:] == [*LEARNING, "t_collapse", *DYNAMIC]
    assert summary["informative_frac"].is_between(0, 1).all()
    steps = pl.read_parquet(out / "steps.parquet")
    assert (steps["kept_groups"] <= 4).all() and (steps["gen_rounds"] <= 3).all()
    # the dynamic-sampling summary is the step table's own per-run aggregate
    for row in summary.iter_rows(named=True):
        s = steps.filter(pl.col("run_id") == row["controller"])
        rounds = s["gen_rounds"].to_list()
        assert row["gen_rounds_mean"] == pytest.approx(sum(rounds) / len(rounds))
        aborts = s["dynamic_sampling_abort"].to_list()
        assert row["dynamic_sampling_abort_frac"] == pytest.approx(sum(aborts) / len(aborts))
        assert row["wasted_rollout_s"] == pytest.approx(sum(s["wasted_rollout_s"].to_list()))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["dynamic_sampling"] == {
        "gen_batch_factor": 1.5,
        "max_gen_batches": 3,
        "refill": "missing",
    }
    assert cfg["rewards"]["pass_rate"] == "beta:0.6,1.4" and cfg["target_reward"] == 0.2
    assert "time_to_target_s" in res.output


def test_without_a_pass_rate_the_summary_is_unchanged(tmp_path, calibration_file):
    res, out = _sim(tmp_path, calibration_file)
    assert res.exit_code == 0, res.output
    summary = pl.read_csv(out / "summary.csv")
    assert not set(LEARNING + DYNAMIC) & set(summary.columns)
    assert "informative_frac" not in res.output


def test_unreachable_target_is_empty_not_an_error(tmp_path, calibration_file):
    res, out = _sim(tmp_path, calibration_file, "--pass-rate", "fixed:0.2", "--target-reward", "1")
    assert res.exit_code == 0, res.output
    summary = pl.read_csv(out / "summary.csv")
    assert summary["time_to_target_s"].is_null().all()
    assert summary["final_reward"].is_between(0.05, 0.4).all()


def test_scenario_pass_rate_block_is_the_default(tmp_path):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(calibration_dict(pass_rate={"spec": "fixed:0.5"})))
    res, out = _sim(tmp_path, cal)
    assert res.exit_code == 0, res.output
    assert pl.read_csv(out / "summary.csv")["informative_frac"].is_not_null().all()
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["rewards"]["pass_rate"] == "fixed:0.5"


def test_pass_rate_file(tmp_path, calibration_file):
    f = tmp_path / "rates.csv"
    f.write_text("pass_rate\n0.1\n0.5\n0.9\n")
    res, out = _sim(tmp_path, calibration_file, "--pass-rate", str(f))
    assert res.exit_code == 0, res.output
    assert set(pl.read_parquet(out / "rollouts.parquet")["reward"].unique()) <= {0.0, 1.0}


def test_sweep_with_rewards(tmp_path, calibration_file):
    res, out = _sim(
        tmp_path,
        calibration_file,
        "--controller",
        "static:4",
        "--pass-rate",
        "fixed:0.3",
        "--dynamic-sampling",
        "--target-reward",
        "0.1",
        cmd="sweep",
    )
    assert res.exit_code == 0, res.output
    runs = pl.read_csv(out / "runs.csv")
    assert runs.columns[-9:] == [*LEARNING, "t_collapse", *DYNAMIC, "status", "error"]  # grid last
    assert "informative_frac" in pl.read_csv(out / "means.csv").columns


@pytest.mark.parametrize("cmd", ["sim", "sweep"])
@pytest.mark.parametrize(
    "args,needle",
    [
        (["--pass-rate", "fixed:1.5"], "--pass-rate"),
        (["--pass-rate", "fixed:nan"], "--pass-rate"),
        (["--pass-rate", "beta:0,2"], "A must be finite and > 0"),
        (["--pass-rate", "nope.csv"], "nope.csv"),
        (["--pass-rate", "fixed:0.3", "--target-reward", "1.5"], "--target-reward"),
        (["--pass-rate", "fixed:0.3", "--target-reward", "nan"], "--target-reward"),
        (["--target-reward", "0.5"], "needs rewards"),
        (["--dynamic-sampling"], "needs rewards"),
        (["--pass-rate", "fixed:0.3", "--gen-batch-factor", "2"], "needs --dynamic-sampling"),
        (["--pass-rate", "fixed:0.3", "--refill", "missing"], "needs --dynamic-sampling"),
        (
            ["--pass-rate", "fixed:0.3", "--dynamic-sampling", "--gen-batch-factor", "0.5"],
            "--gen-batch-factor",
        ),
        (
            ["--pass-rate", "fixed:0.3", "--dynamic-sampling", "--max-gen-batches", "-2"],
            "--max-gen-batches",
        ),
    ],
)
def test_bad_input_exit_2_nothing_written(tmp_path, calibration_file, cmd, args, needle):
    res, out = _sim(tmp_path, calibration_file, *args, cmd=cmd)
    assert res.exit_code == 2, res.output
    assert needle in res.output
    assert not out.exists()


def test_bad_reward_file_field(tmp_path, calibration_file):
    f = tmp_path / "scores.csv"
    f.write_text("prompt,score\na,1\n")
    res, out = _sim(tmp_path, calibration_file, "--pass-rate", str(f))
    assert res.exit_code == 2 and "scores.csv: line 1 (header): no column 'pass_rate'" in res.output
    assert not out.exists()


def test_bad_scenario_pass_rate_block(tmp_path):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(calibration_dict(pass_rate={"spec": "beta:-1,2"})))
    res, out = _sim(tmp_path, cal)
    assert res.exit_code != 0 and "field 'pass_rate'" in res.output
    assert not out.exists()


def test_async_pipeline_with_dynamic_sampling(tmp_path, calibration_file):
    res, out = _sim(
        tmp_path,
        calibration_file,
        "--controller",
        "static:4",
        "--pipeline",
        "sync,one-step-off,bounded:2",
        "--pass-rate",
        "fixed:0.3",
        "--dynamic-sampling",
        "--max-gen-batches",
        "2",
    )
    assert res.exit_code == 0, res.output
    steps = pl.read_parquet(out / "steps.parquet")
    assert steps["run_id"].n_unique() == 3 and (steps["kept_groups"] <= 4).all()


def test_dynamic_sampling_refuses_oversample(tmp_path, calibration_file):
    res, out = _sim(
        tmp_path,
        calibration_file,
        "--pipeline",
        "oversample:1.5",
        "--pass-rate",
        "fixed:0.3",
        "--dynamic-sampling",
    )
    assert res.exit_code != 0 and "oversample" in res.output
    assert not out.exists()


def test_scenario_default_target(tmp_path):
    cal = tmp_path / "cal.json"
    d = calibration_dict(pass_rate={"spec": "fixed:0.5"})
    d["defaults"]["target_reward"] = 0.4
    cal.write_text(json.dumps(d))
    res, out = _sim(tmp_path, cal)
    assert res.exit_code == 0, res.output
    assert pl.read_csv(out / "summary.csv")["time_to_target_s"].is_not_null().all()
    assert json.loads((out / "config.json").read_text())["target_reward"] == 0.4
    d["defaults"]["target_reward"] = 1.5
    cal.write_text(json.dumps(d))
    res, out = _sim(tmp_path, cal)
    assert res.exit_code != 0 and "defaults.target_reward" in res.output


def test_coupling_follows_the_pass_rate_model(tmp_path):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(calibration_dict(pass_rate={"spec": "beta:2,3", "coupling": -0.5})))
    res, out = _sim(tmp_path, cal)
    assert res.exit_code == 0, res.output
    assert json.loads((out / "config.json").read_text())["rewards"]["coupling"] == -0.5
    res, out2 = _sim(tmp_path / "b", cal, "--pass-rate", "fixed:0.2")
    assert res.exit_code == 0, res.output
    assert json.loads((out2 / "config.json").read_text())["rewards"]["coupling"] == 0.0


def test_an_empty_time_to_target_says_why_once(tmp_path, calibration_file):
    """No target reward anywhere (option or calibration): the column is empty and one
    line says why; a target never reached: one line says that instead."""
    res, out = _sim(tmp_path, calibration_file, "--pass-rate", "fixed:0.5", "--controller",
                    "static:2,static:4")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert pl.read_csv(out / "summary.csv")["time_to_target_s"].is_null().all()
    why = [x for x in res.output.splitlines() if x.startswith("time_to_target_s")]
    assert why == [
        "time_to_target_s is empty: no target reward (give --target-reward R, or "
        "defaults.target_reward in the calibration)"
    ], res.output
    res, out = _sim(tmp_path, calibration_file, "--pass-rate", "fixed:0.2", "--target-reward", "1")
    why = [x for x in res.output.splitlines() if x.startswith("time_to_target_s")]
    assert why == [
        "time_to_target_s is empty where the target reward 1 was not reached in 12 steps"
    ]


def test_dynamic_sampling_alone_stops_a_hopeless_step_after_ten_rounds(tmp_path, calibration_file):
    """--dynamic-sampling with no --max-gen-batches: verl's DAPO recipe cap (10 rounds);
    2 % of groups informative (p = 0.995, G = 4; 40 groups a step, 0.8 kept on average, 4
    needed): the steps abort there, and one line says how many."""
    res, out = _sim(tmp_path, calibration_file, "--pass-rate", "fixed:0.995",
                    "--dynamic-sampling", "--controller", "static:4", "--steps", "3")  # fmt: skip
    assert res.exit_code == 0, res.output
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["dynamic_sampling"]["max_gen_batches"] == 10
    steps = pl.read_parquet(out / "steps.parquet")
    aborted = int(steps["dynamic_sampling_abort"].sum())
    assert aborted >= 2 and (steps.filter("dynamic_sampling_abort")["gen_rounds"] == 10).all()
    assert (
        f"dynamic sampling: static:4 (sync) aborted {aborted} of 3 steps after "
        "--max-gen-batches 10 rounds with fewer than 4 informative groups" in res.output
    )


def test_dynamic_sampling_that_never_keeps_a_group_says_so(tmp_path, calibration_file):
    res, _ = _sim(tmp_path, calibration_file, "--pass-rate", "fixed:1", "--dynamic-sampling",
                  "--controller", "static:4", "--steps", "2")  # fmt: skip
    errors = [x for x in res.output.splitlines() if x.startswith("Error:")]
    assert res.exit_code != 0 and len(errors) == 1 and "Traceback" not in res.output
    assert (
        "dynamic sampling: no step of static:4 (sync) kept a group: every step aborted after "
        "--max-gen-batches 10 rounds of groups whose rewards were all equal"
    ) in errors[0]
