"""bench/verl_time_to_target.py: the naive rules for time to target, by hand."""

import sys
from pathlib import Path

import polars as pl
import pytest

BENCH = Path(__file__).parents[1] / "bench"
sys.path.insert(0, str(BENCH))
try:
    import verl_time_to_target as bench
finally:
    sys.path.remove(str(BENCH))


def _cal(reward: list[float], timing: list[float]) -> pl.DataFrame:
    """A calibration run's curve as :func:`bench.curve` gives it (steps 1..n)."""
    n = len(reward)
    return pl.DataFrame(
        {"step": list(range(1, n + 1)), "reward_mean": reward, "timing_s/step": timing}
    ).with_columns(pl.col("timing_s/step").cum_sum().alias("t_end"))


def test_three_rules_three_answers_on_a_step_curve():
    # steps 1-12, reward 0.8 for 5 steps then 1.0; step i takes i seconds (mean 6.5 s)
    cal = _cal([0.8] * 5 + [1.0] * 7, [float(i) for i in range(1, 13)])
    rules = bench.naive_rules(cal, 0.95)
    # trailing 10-step means of the run: 0.90, 0.92, 0.94 at steps 10-12: never 0.95
    assert rules["constant"] == (None, None)
    # last reward 1.0 carried forward: the first full window, step 10, at 10 x 6.5 s
    assert rules["persistence"] == (pytest.approx(65.0), 10)
    # least squares: slope 3.5 / 143 = 7/286, intercept 11/12 - 6.5 x 7/286 = 25/33;
    # the 10-step mean ending at n is the line at n - 4.5: 0.941 at 12, 0.966 at 13
    assert rules["linear"] == (pytest.approx(13 * 6.5), 13)


def test_the_constant_rule_is_the_run_s_own_time():
    cal = _cal([0.8] * 5 + [1.0] * 7, [float(i) for i in range(1, 13)])
    # trailing mean 0.90 >= 0.85 first at step 10, which ends at 1 + ... + 10 = 55 s
    assert bench.naive_rules(cal, 0.85)["constant"] == (pytest.approx(55.0), 10)


def test_a_slow_line_is_extrapolated_past_the_run_and_a_low_run_never_reaches():
    # reward 0.49 + 0.01 step exactly; mean step 25 s
    cal = _cal([0.50, 0.51, 0.52, 0.53], [10.0, 20.0, 30.0, 40.0])
    rules = bench.naive_rules(cal, 0.9)
    # window mean at n = 0.49 + 0.01 (n - 4.5): 0.895 at 45, 0.905 at 46
    assert rules["linear"] == (pytest.approx(46 * 25.0), 46)
    assert rules["constant"] == (None, None)  # four steps: no full window
    assert rules["persistence"] == (None, None)  # 0.53 < 0.9


def test_a_falling_line_never_reaches():
    cal = _cal([0.95 - 0.01 * i for i in range(12)], [1.0] * 12)
    rules = bench.naive_rules(cal, 0.96)
    assert rules["linear"] == (None, None)
    assert rules["persistence"] == (None, None)


def test_simulated_counts_the_steps_ending_by_the_time(tmp_path):
    pl.DataFrame(
        {
            "controller": ["static:4", "static:8"],
            "pipeline": ["sync", "sync"],
            "time_to_target_s": [30.0, None],
        }
    ).write_csv(tmp_path / "summary.csv")
    pl.DataFrame(
        {
            "run_id": ["static:4"] * 4 + ["static:8"] * 2,
            "t_end": [10.0, 20.0, 30.0, 40.0, 15.0, 30.0],
        }
    ).write_parquet(tmp_path / "steps.parquet")
    got = bench.simulated(tmp_path)
    assert got["step"].to_list() == [3, None]
    assert got["sim"].to_list() == [tmp_path.name] * 2


def test_errors_in_time_and_steps():
    table = pl.DataFrame({"time_to_target_s": [120.0, None], "step": [15, None]})
    got = bench.with_errors(table, {"held": (100.0, 10), "never": (None, None)})
    assert got["err_held"].to_list() == [pytest.approx(0.2), None]
    assert got["err_steps_held"].to_list() == [pytest.approx(0.5), None]
    assert "err_never" not in got.columns
