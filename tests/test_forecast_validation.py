"""bench/forecast_validation.py: the plan's pass rule over a group of runs, by hand."""

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "forecast_validation", Path(__file__).parents[1] / "bench" / "forecast_validation.py"
)
fv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fv)


def test_pass_rule_against_the_best_naive_rule_on_the_mean_over_runs():
    errors = {
        "a": {"forecast": 0.10, "persistence": 0.20, "linear": 0.30, "static": 0.40},
        "b": {"forecast": 0.30, "persistence": 0.20, "linear": 0.10, "static": 0.40},
    }
    # persistence and linear both average 0.20: the first listed is the best; forecast 0.20
    row = fv.group_line("g", errors)
    assert "| persistence 0.200 |" in row
    assert "+0.000 (-0.100 to +0.100)" in row
    assert "1 of 2" in row and "does not pass" in row
    errors["b"]["forecast"] = 0.15
    assert "| passes |" in fv.group_line("g", errors)


def test_a_non_empty_out_is_refused(tmp_path):
    (tmp_path / "summary.md").write_text("earlier result")
    with pytest.raises(SystemExit) as exc:
        fv.main(["--out", str(tmp_path), "--only", "groups"])
    assert exc.value.code == 2
    assert (tmp_path / "summary.md").read_text() == "earlier result"


def test_the_verl_summary_is_headed_by_its_token_errors(tmp_path):
    tb = tmp_path / "tb"
    tb.mkdir()
    (tb / "q3b_fsdp_base").symlink_to(Path(__file__).parent / "data" / "verl_tb" / "q3b_fsdp_base")
    assert fv.main(["--out", str(tmp_path / "out"), "--only", "verl", "--tb-dir", str(tb)]) == 0
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "P(max/median" not in summary
    assert summary.startswith("verl runs: mean absolute error (tokens) of response_length/mean")
