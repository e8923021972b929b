"""The ``backtest`` forecast model (calibration.validation.forecast) and the third plan's
per-configuration pass rule (bench/forecast_validation.py), on series and errors worked
by hand."""

import importlib.util
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from rolloutlab.calibration.readers.grouped import read_grouped
from rolloutlab.calibration.validation.forecast import (
    ForecastConfig,
    backtest_forecast,
    rule_forecasts,
)

from rolloutlab.cli import main

_spec = importlib.util.spec_from_file_location(
    "forecast_validation", Path(__file__).parents[1] / "bench" / "forecast_validation.py"
)
fv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fv)


def _mean_so_far(y):
    return lambda k: np.asarray(y[:k].mean())


def test_a_constant_series_is_forecast_exactly_with_equal_weights():
    y = np.full(20, 7.0)
    bt = backtest_forecast(y, 3, _mean_so_far(y), probability=False)
    assert bt.forecast == pytest.approx([7.0, 7.0, 7.0])
    assert bt.weights == pytest.approx(
        {"local-level": 1 / 3, "persistence": 1 / 3, "static": 1 / 3}
    )


def test_an_alternating_series_weights_the_rules_that_are_exact_in_the_window():
    # 0, 1, 0, 1, ...: from every origin k = 10, 12, ..., 18 the rest of the window has
    # mean 0.5, and so do the static fit (mean of y[:k]) and persistence (mean of the
    # last 10): both exact, so they share the weight and the forecast is 0.5
    y = np.tile([0.0, 1.0], 10)
    bt = backtest_forecast(y, 2, _mean_so_far(y), probability=False)
    assert bt.errors["static"] == pytest.approx(0.0)
    assert bt.errors["persistence"] == pytest.approx(0.0)
    assert bt.weights["static"] == pytest.approx(bt.weights["persistence"])
    assert bt.weights["static"] >= 1 / 3
    assert bt.forecast == pytest.approx([0.5, 0.5])


def test_a_level_shift_is_followed_by_the_rules_that_follow_it():
    # 0 for 10 steps, then 1: persistence (last 10) and the local level catch up, the
    # static mean of every step does not, so it gets the least weight
    y = np.r_[np.zeros(10), np.ones(10)]
    bt = backtest_forecast(y, 1, _mean_so_far(y), probability=False)
    assert bt.errors["static"] > bt.errors["persistence"]
    assert bt.weights["static"] < bt.weights["persistence"]
    # persistence from all 20 steps is 1, the static mean 0.5: the mix lies between
    assert 0.5 < bt.forecast[0] <= 1.0


def test_rule_forecasts_by_hand():
    y = np.r_[np.zeros(5), np.full(10, 2.0)]  # the last 10 steps are all 2
    f = rule_forecasts(y, 2, np.asarray(0.25), probability=False)
    assert f["persistence"] == pytest.approx([2.0, 2.0])
    assert f["static"] == pytest.approx([0.25, 0.25])
    assert list(f) == ["local-level", "persistence", "static"]
    p = rule_forecasts(np.full((4, 2), 0.5), 1, np.array([0.2, 0.3]), probability=True)
    assert p["local-level"].tolist() == [[0.5, 0.5]]  # nothing varies: the last value


def test_per_configuration_best_rule_by_hand():
    errors = {
        "a_s1": {"forecast": 0.10, "persistence": 0.05, "linear": 0.30, "static": 0.40},
        "a_s2": {"forecast": 0.10, "persistence": 0.15, "linear": 0.30, "static": 0.40},
        "b_s1": {"forecast": 0.20, "persistence": 0.40, "linear": 0.30, "static": 0.10},
    }
    # a's best: persistence (0.10), b's: static (0.10); benchmark mean (0.05 + 0.15 + 0.10) / 3
    row = fv.group_line("g", errors, per_config=True)
    assert "a persistence, b static" in row
    assert "0.133 | each" in row and ") 0.100 |" in row
    assert "-0.033 (-0.100 to +0.050)" in row
    assert "1 of 3" in row and "does not pass" in row
    # the pooled rule picks one rule for all runs: persistence 0.200 vs static 0.300
    assert "| persistence 0.200 |" in fv.group_line("g", errors)


def test_within_counts_scored_cells_only():
    cells = pl.DataFrame(
        {
            "p_meas": [0.5, 0.5, 0.5, 0.01],
            "p_forecast": [0.55, 0.65, 0.4, 0.9],
            "scored": [True, True, True, False],
        }
    )
    assert fv.within(cells) == 2  # 0.05 and 0.10 (the bound included); 0.15 is not


def test_the_cli_writes_the_backtest_weights(tmp_path):
    # three steps, K = 2: no origin leaves 2 fit steps and 1 scored one, so the
    # candidates are weighted equally
    out = tmp_path / "bt"
    res = CliRunner().invoke(
        main,
        [
            "compare",
            "groups",
            "tests/data/packed_lengths",
            "--fit-steps",
            "2",
            "--tau",
            "2",
            "--forecast",
            "--forecast-model",
            "backtest",
            "--draws",
            "5",
            "--reps",
            "5",
            "--out",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    assert "forecast (backtest)" in res.output
    cells = pl.read_csv(out / "forecast_cells.csv")
    for c in ("local_level", "persistence", "static"):
        assert cells[f"weight_{c}"].to_list() == pytest.approx([1 / 3] * cells.height, abs=1e-4)
    assert cells["p_forecast"].is_between(0, 1).all()
    span = pl.read_csv(out / "forecast_makespan.csv")
    assert span["weight_static"].to_list() == pytest.approx(
        [1 / 3] * span.height, abs=0.005
    )  # 2 decimals


def test_the_measured_cache_is_reused_and_keyed_by_the_file(tmp_path, monkeypatch):
    cfg = ForecastConfig(fit_steps=20, taus=(3.0,), draws=5)
    trace = read_grouped([fv.run_file("real_sync", 1)])
    first = fv.measured_cached("real_sync", 1, trace, cfg, tmp_path)
    (kept,) = tmp_path.iterdir()
    assert kept.name.startswith("real_sync_s1_") and kept.name.endswith("_t3_d5_r0.npy")

    def no_measuring(*args):
        raise AssertionError("measured again")

    monkeypatch.setattr(fv, "measured", no_measuring)
    assert np.array_equal(fv.measured_cached("real_sync", 1, trace, cfg, tmp_path), first)
    assert first.shape == (40, 8, 1)
