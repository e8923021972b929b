"""`rolloutlab real progress` on hand-written run directories (no torch)."""

import json

import polars as pl
from click.testing import CliRunner

from rolloutlab.cli import main


def _run(d, task, controller, seed, accs):
    d.mkdir(parents=True)
    cfg = {"task_name": task, "controller": controller, "seed": seed}
    (d / "config.json").write_text(json.dumps({"config": cfg}))
    evals = [{"step": s, "t_s": 10.0 * (i + 1), "accuracy": a} for i, (s, a) in enumerate(accs)]
    (d / "eval.jsonl").write_text("\n".join(json.dumps(e) for e in evals))
    steps = [{"step": s, "t_s": float(s), "G": 4, "reward_mean": 0.5} for s in range(30)]
    (d / "learner.jsonl").write_text("\n".join(json.dumps(e) for e in steps))


def test_time_to_target_is_the_first_evaluation_at_or_above_it(tmp_path):
    _run(tmp_path / "a", "graph-walk", "static:4", 0, [(-1, 0.2), (9, 0.39), (19, 0.4), (29, 0.5)])
    _run(tmp_path / "b", "graph-walk", "sagc", 0, [(-1, 0.2), (9, 0.3), (29, 0.35)])
    res = CliRunner().invoke(
        main,
        [
            "real",
            "progress",
            str(tmp_path / "a"),
            str(tmp_path / "b"),
            "--target-accuracy",
            "0.4",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert res.exit_code == 0, res.output
    t = pl.read_csv(tmp_path / "out" / "runs.csv")
    a, b = t.row(0, named=True), t.row(1, named=True)
    assert (a["time_to_target_s"], a["steps_to_target"], a["accuracy_end"]) == (30.0, 20, 0.5)
    assert b["time_to_target_s"] is None and b["reward_last20"] == 0.5
    assert (tmp_path / "out" / "progress.png").stat().st_size > 0


def test_runs_of_different_tasks_are_refused_and_nothing_is_written(tmp_path):
    _run(tmp_path / "a", "graph-walk", "static:4", 0, [(-1, 0.2)])
    _run(tmp_path / "b", "digit-chain", "static:4", 0, [(-1, 0.2)])
    res = CliRunner().invoke(
        main,
        [
            "real",
            "progress",
            str(tmp_path / "a"),
            str(tmp_path / "b"),
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert res.exit_code == 2 and "different tasks" in res.output
    assert not (tmp_path / "o").exists()
    res = CliRunner().invoke(
        main, ["real", "progress", str(tmp_path), "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 2 and "config.json" in res.output
