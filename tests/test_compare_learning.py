"""`rolloutlab compare learning` on small synthetic real-run directories (no torch)."""

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from rolloutlab.analysis.learning_compare import compare_learning, cost_model
from rolloutlab.calibration.learning_fit import simulate_curve
from rolloutlab.calibration.run_curve import read_run
from rolloutlab.sim import trace

from rolloutlab.cli import main

COLUMNS = ["run", "controller", "measured_time_to_target_s", "predicted_time_to_target_s",
           "rel_error", "measured_rank", "predicted_rank"]  # fmt: skip


def _write(d, G, seed, task="graph-walk", controller=None):
    """A real-run directory (trace v2 with `correct`, learner/eval JSONL, config) whose
    group counts come from the learning model itself; every step takes 1 s."""
    curve = simulate_curve(
        2.0, 0.8, 0.6, G=G, B=16, T=40, lr=1e-6, seed=seed, dynamic_sampling=True
    )
    d.mkdir()
    rows, steps, learner = [], [], []
    for t, k in enumerate(curve.counts):
        for i, ki in enumerate(k):
            for j in range(G):
                rows.append(dict(run_id="r", step=t, prompt_id=t * 16 + i, sample_idx=j, group_size=G,
                                 policy_version=t, learner_version=t, prompt_tokens=5, response_tokens=10,
                                 finish_reason="stop", worker=0, t_submit=float(t), t_first_token=t + 0.1,
                                 t_finish=t + 0.5, reward=float(j < ki), correct=bool(j < ki)))  # fmt: skip
        acc = float(k.sum() / (16 * G))
        steps.append(dict(run_id="r", step=t, t_start=float(t), t_end=t + 1.0, gen_time=0.5,
                          train_time=0.4, sync_time=0.1, lr=1e-6, reward_mean=acc,
                          controller_state="{}"))  # fmt: skip
        learner.append({"step": t, "t_s": t + 1.0, "G": G, "reward_mean": acc})
    trace.write_parquet(pl.DataFrame(rows, schema=trace.ROLLOUT_SCHEMA), d / "rollouts.parquet", "rollouts")  # fmt: skip
    trace.write_parquet(pl.DataFrame(steps, schema=trace.STEP_SCHEMA), d / "steps.parquet", "steps")
    cfg = {"task_name": task, "controller": controller or f"static:{G}", "seed": seed,
           "dynamic_sampling": True}  # fmt: skip
    (d / "config.json").write_text(json.dumps({"config": cfg}))
    (d / "learner.jsonl").write_text("\n".join(json.dumps(x) for x in learner))
    (d / "eval.jsonl").write_text(json.dumps({"step": -1, "t_s": 0.0, "accuracy": 0.5}))


def test_the_fit_run_predicts_its_own_clock_and_runs_are_ranked(tmp_path):
    _write(tmp_path / "fit", 8, 0)
    _write(tmp_path / "g4", 4, 1)
    _write(tmp_path / "g16", 16, 2)
    c0, c1 = cost_model(
        trace.read(tmp_path / "fit" / "steps.parquet", "steps"), read_run(tmp_path / "fit")
    )
    assert (c0, c1) == pytest.approx((0.1, 0.9 / (16 * 8)))  # 1 s per step, nothing between
    table, curves, fit = compare_learning(
        tmp_path / "fit", [tmp_path / "fit", tmp_path / "g4", tmp_path / "g16"], 0.7
    )
    assert table.columns == COLUMNS
    measured, predicted = curves["fit"]
    assert predicted["t_end"].to_list() == pytest.approx(measured["t_end"].to_list())
    g16 = curves["g16"][1]["t_end"].to_numpy()
    assert np.diff(g16) == pytest.approx(0.1 + 0.9 * 2)  # twice the fit run's rollouts per step
    assert sorted(table["predicted_rank"].to_list()) == [1, 2, 3]
    assert abs(fit["kappa"] - 2.0) < 1.0


def test_cli_writes_the_csv_and_refuses_mixed_tasks_or_a_bad_target(tmp_path):
    _write(tmp_path / "fit", 8, 0)
    _write(tmp_path / "other", 4, 1, task="digit-chain")
    _write(tmp_path / "g4", 4, 1)
    base = ["compare", "learning", "--fit", str(tmp_path / "fit"), "--out"]
    res = CliRunner().invoke(main, [*base, str(tmp_path / "o1"), "--real", str(tmp_path / "g4"),
                                    "--target-accuracy", "0.7"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert pl.read_csv(tmp_path / "o1" / "learning_comparison.csv").columns == COLUMNS
    assert (tmp_path / "o1" / "learning_comparison.png").exists()
    # and `rolloutlab report` turns it into a page with its table, intro and figure
    res = CliRunner().invoke(main, ["report", str(tmp_path / "o1"), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    page = next((tmp_path / "r").glob("*.html")).read_text()
    assert "compare-learning" in page and "learning_comparison.csv" in page
    assert "predicted_time_to_target_s" in page and "data:image/png;base64," in page
    for extra, msg in (
        (["--real", str(tmp_path / "other"), "--target-accuracy", "0.7"], "different tasks"),
        (
            ["--real", str(tmp_path / "g4"), "--target-accuracy", "1.5"],
            "1.5 is not in the range 0.0<x<=1.0",
        ),
    ):
        res = CliRunner().invoke(main, [*base, str(tmp_path / "o2"), *extra])
        assert res.exit_code == 2 and msg in res.output
        assert not (tmp_path / "o2").exists()
