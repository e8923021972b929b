"""bench/step_cost_interleaved.py (results/step_cost_law/PLAN2.md): settings stepped
round-robin in one process, each a normal run directory."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

pytest.importorskip("torch")

_PATH = Path(__file__).resolve().parents[1] / "bench" / "step_cost_interleaved.py"
_SPEC = importlib.util.spec_from_file_location("step_cost_interleaved", _PATH)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def test_two_capacities_of_one_setting_draw_the_same_rollouts(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLOUTLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(bench, "FIT", ((2, 2, 4, 0), (2, 2, 2, 0)))
    monkeypatch.setattr(bench, "HELDOUT", ())
    monkeypatch.setattr(bench, "BEYOND", ())
    argv = ["--out", str(tmp_path), "--pass", "1", "--steps", "2", "--warm-start-steps", "2"]
    assert bench.main(argv) == 0
    root = tmp_path / "pass1"
    log = json.loads((root / "harness.json").read_text())
    assert log["rounds"] == 2 and log["settings"] == ["g2_b2_c4_s0", "g2_b2_c2_s0"]
    tables = {}
    for name in log["settings"]:
        learner = [json.loads(line) for line in (root / name / "learner.jsonl").open()]
        assert [r["step"] for r in learner] == [0, 1]
        assert all(r["cpu_gen_s"] > 0 for r in learner)
        tables[name] = pl.read_parquet(root / name / "rollouts.parquet").sort(
            "step", "prompt_id", "sample_idx"
        )
    cols = ["step", "response_tokens", "correct"]
    assert tables["g2_b2_c4_s0"].select(cols).equals(tables["g2_b2_c2_s0"].select(cols))
    with pytest.raises(SystemExit):  # a pass that exists is never overwritten
        bench.main(argv)


def test_plan3_shares_plan2s_fit_and_holds_out_seeds_no_plan_ran():
    fit2, held2, beyond2 = bench.plan_settings(2)
    fit3, held3, beyond3 = bench.plan_settings(3)
    assert fit3 == fit2 and beyond3 == ()
    # plan 1 ran at seed 0 only (bench/step_cost_measure.py), plan 2 these settings
    seeds_ran = {(g, b, s) for g, b, _, s in fit2 + held2 + beyond2}
    assert all((g, b, s) not in seeds_ran and s != 0 for g, b, _, s in held3)
    assert {g * b for g, b, _, _ in held3} == {256}
    with pytest.raises(ValueError, match="plan must be 2 or 3"):
        bench.plan_settings(1)


@pytest.mark.slow(
    reason="two passes of four real sync runs (warm start, 2 steps, final evaluation each) "
    "and the evaluation's draws (whole step, generation, training): about 28 s CPU, 110 s "
    "wall at load 10"
)
def test_plan2_evaluation_of_two_passes(tmp_path, monkeypatch):
    import sys

    monkeypatch.syspath_prepend(str(_PATH.parent))
    import step_cost_validation as validation

    monkeypatch.setenv("ROLLOUTLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(bench, "FIT", ((2, 2, 4, 0), (2, 4, 4, 0), (2, 2, 2, 0)))
    monkeypatch.setattr(bench, "HELDOUT", ((2, 4, 4, 1),))
    monkeypatch.setattr(bench, "BEYOND", ())
    monkeypatch.setitem(sys.modules, "step_cost_interleaved", bench)
    monkeypatch.setattr(validation, "plan2_runs", bench)
    monkeypatch.setattr(validation, "MIN_STEPS", 2)
    runs = tmp_path / "runs"
    for p in ("1", "2"):
        argv = ["--out", str(runs), "--pass", p, "--steps", "2", "--warm-start-steps", "2"]
        assert bench.main(argv) == 0
    text = validation.plan2(runs, tmp_path / "check", draws=2)
    table = pl.read_csv(tmp_path / "check" / "step_cost_validation.csv")
    assert table["role"].to_list().count("held out") == 1 and table.height == 4
    assert (table["passes"] == 2).all() and (table["steps"] == 2).all()
    held = table.filter(pl.col("role") == "held out").row(0, named=True)
    per_pass = []
    for p in ("pass1", "pass2"):
        rows = [json.loads(line) for line in (runs / p / "g2_b4_c4_s1" / "learner.jsonl").open()]
        per_pass.append(sum(r["cpu_gen_s"] + r["cpu_train_s"] + r["cpu_sync_s"] for r in rows) / 2)
    assert held["measured_s"] == pytest.approx(sum(per_pass) / 2)
    assert held["pass_spread"] == pytest.approx(abs(per_pass[0] - per_pass[1]) / held["measured_s"])
    assert held["law_error"] == pytest.approx(held["law_s"] / held["measured_s"] - 1)
    assert "Target (|law error| <= 10 % at each 256-rollout setting)" in text
    # the training phase alone: same draws, so the law's phases add up to its step
    validation.plan2(runs, tmp_path / "train", draws=2, phase="train")
    validation.plan2(runs, tmp_path / "gen", draws=2, phase="gen")
    # plan 3 on the same runs (its held-out settings those of this fixture)
    monkeypatch.setattr(bench, "HELDOUT3", bench.HELDOUT)
    text3 = validation.plan3(runs, tmp_path / "plan3", draws=2)
    step3 = pl.read_csv(tmp_path / "plan3" / "step_cost_validation.csv")
    train3 = pl.read_csv(tmp_path / "plan3" / "train_cost_validation.csv")
    held3 = step3.filter(pl.col("role") == "held out").row(0, named=True)
    assert held3["measured_s"] == pytest.approx(held["measured_s"])
    train_held = train3.filter(pl.col("role") == "held out").row(0, named=True)
    assert train_held["measured_s"] == pytest.approx(
        np.mean([np.mean([json.loads(line)["cpu_train_s"]
                          for line in (runs / p / "g2_b4_c4_s1" / "learner.jsonl").open()])
                 for p in ("pass1", "pass2")])
    )  # fmt: skip
    assert "Pass rule (PLAN3.md)" in text3 and "plan2_drawn_trained_rollouts" in train3.columns
    train = pl.read_csv(tmp_path / "train" / "train_cost_validation.csv")
    gen = pl.read_csv(tmp_path / "gen" / "gen_cost_validation.csv")
    sync = json.loads((tmp_path / "check" / "law.json").read_text())["law"]["sync_s"]
    h_train = train.filter(pl.col("role") == "held out").row(0, named=True)
    h_gen = gen.filter(pl.col("role") == "held out").row(0, named=True)
    assert h_train["law_s"] + h_gen["law_s"] + sync == pytest.approx(held["law_s"])
    per_pass = []
    for p in ("pass1", "pass2"):
        rows = [json.loads(line) for line in (runs / p / "g2_b4_c4_s1" / "learner.jsonl").open()]
        per_pass.append(sum(r["cpu_train_s"] for r in rows) / 2)
    assert h_train["measured_s"] == pytest.approx(sum(per_pass) / 2)
    with pytest.raises(ValueError, match="only 2 steps common"):  # the stop rule's minimum
        monkeypatch.setattr(validation, "MIN_STEPS", 3)
        validation.plan2(runs, tmp_path / "check2")
