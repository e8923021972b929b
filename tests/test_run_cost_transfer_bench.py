"""bench/run_cost_transfer.py: a run's setting, the pair check, and one pair end to end."""

import json
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.compare_helpers import write_run

BENCH = Path(__file__).parents[1] / "bench"
sys.path.insert(0, str(BENCH))
try:
    import run_cost_transfer as bench
finally:
    sys.path.remove(str(BENCH))


def _static(run_dir: Path, G: int, B: int) -> Path:
    doc = json.loads((run_dir / "config.json").read_text())
    doc["config"].update(controller=f"static:{G}", prompts=B)
    (run_dir / "config.json").write_text(json.dumps(doc))
    return run_dir


def test_setting_reads_g_b_and_the_median_step_time(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps({"config": {"controller": "static:16", "prompts": 8}})
    )
    # steps of 1, 2 and 6 s: median 2 s
    pl.DataFrame({"t_start": [0.0, 1.0, 3.0], "t_end": [1.0, 3.0, 9.0]}).write_parquet(
        tmp_path / "steps.parquet"
    )
    assert bench.setting(tmp_path) == (16, 8, 2.0)


def test_a_pair_at_two_batch_sizes_is_refused(tmp_path):
    cal = _static(write_run(tmp_path / "cal", [8, 8]), 8, 4)
    held = _static(write_run(tmp_path / "held", [4, 4]), 4, 8)
    with pytest.raises(SystemExit, match="a pair shares B"):
        bench.one_pair(cal, held, 5, 1, tmp_path / "out", [], None)


@pytest.mark.slow(reason="two calibrations and two sims as CLI subprocesses: 37 s at load 4")
def test_one_pair_end_to_end_and_no_overwrite(tmp_path, monkeypatch):
    cal = _static(write_run(tmp_path / "g8", [8] * 6), 8, 4)
    held = _static(write_run(tmp_path / "g4", [4] * 6, seed=1), 4, 4)
    out = tmp_path / "out"
    argv = ["x", "--pair", f"{cal}={held}", "--sim-steps", "5", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    row = pl.read_csv(out / "transfer.csv").row(0, named=True)
    assert (row["G_cal"], row["G_held"], row["B"]) == (8, 4, 4)
    assert row["pred_g_ratio_s"] == pytest.approx(row["cal_step_s"] / 2, rel=1e-3)
    assert row["err_constant"] == pytest.approx(row["cal_step_s"] / row["held_step_s"] - 1, 1e-3)
    assert row["learner_rule"] in ("origin", "intercept+slope")
    assert row["pred_calibrated_s"] > 0 and row["printed"].startswith("learner ")
    with pytest.raises(SystemExit, match="not overwritten"):
        bench.main()
