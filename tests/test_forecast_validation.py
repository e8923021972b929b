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
    logs = tmp_path / "logs"
    logs.mkdir()
    args = ["--only", "verl", "--tb-dir", str(tb), "--console-dir", str(logs)]
    assert fv.main(["--out", str(tmp_path / "out"), *args]) == 0
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "P(max/median" not in summary
    assert summary.startswith("verl runs (TensorBoard runs; forecast model local-level): mean")
    assert "(tokens) of response_length/mean" in summary


def test_console_logs_are_forecast_beside_the_naive_rules(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    # a mean that steps from 100 to 200 at step 30 and stays: persistence is exact
    lines = [
        f"step:{s} - response_length/mean:{100 if s < 30 else 200} - response_length/max:300"
        for s in range(60)
    ]
    (logs / "run.log").write_text("\n".join(lines) + "\n")
    tb = tmp_path / "tb"
    tb.mkdir()
    args = ["--only", "verl", "--tb-dir", str(tb), "--console-dir", str(logs)]
    assert fv.main(["--out", str(tmp_path / "out"), *args]) == 0
    rows = (tmp_path / "out" / "verl_run.csv").read_text().splitlines()
    head = rows[0].split(",")
    first = dict(zip(head, map(float, rows[1].split(","))))
    assert first["step"] == 51 and first["mean_meas"] == 200
    assert (
        first["mean_persistence"] == 200 and abs(first["mean_static"] - 7200 / 51) < 1e-9
    )  # steps 0-50
    assert abs(first["mean_forecast"] - 200) < 1.0  # the filter follows a level that moved
    assert first["max_forecast"] == 300


def test_missing_console_dir_is_one_line(tmp_path):
    with pytest.raises(SystemExit) as exc:
        fv.main(["--out", str(tmp_path / "o"), "--only", "verl", "--console-dir", "nope"])
    assert exc.value.code == 2


def test_a_plain_clone_reads_the_bundled_tensorboard_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(fv, "TB_SHARED", tmp_path / "no_shared" / "tb")
    monkeypatch.setattr(fv, "CONSOLE_SHARED", tmp_path / "no_shared" / "logs")
    assert fv.main(["--out", str(tmp_path / "out"), "--only", "verl"]) == 0
    assert "no verl console log" in capsys.readouterr().out
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| q3b_fsdp_base |" in summary and "| q3b_mcore_base |" in summary


def test_the_second_plans_margin_and_half_the_runs():
    rules = ("forecast", "persistence", "linear", "static")

    def errs(*rows):
        return {f"r{i}": dict(zip(rules, row, strict=True)) for i, row in enumerate(rows)}

    # margin 0.005 over persistence (0.20): below the 0.010 needed
    small = errs((0.195, 0.20, 0.5, 0.5), (0.195, 0.20, 0.5, 0.5))
    assert "| passes |" in fv.group_line("g", small)
    assert "does not pass" in fv.group_line("g", small, **fv.PASS["fresh"]["p"])
    # margin 0.200 - (0.05 + 0.21 + 0.21) / 3 = 0.043 on the mean, but won on 1 of 3 runs
    one_of_three = errs((0.05, 0.20, 0.5, 0.5), (0.21, 0.20, 0.5, 0.5), (0.21, 0.20, 0.5, 0.5))
    assert "+0.043" in fv.group_line("g", one_of_three)
    assert "does not pass" in fv.group_line("g", one_of_three, **fv.PASS["fresh"]["p"])
    # verl: 2 % of the best rule's 50 tokens is 1 token; 1.5 tokens passes, 0.5 does not
    assert "| passes |" in fv.group_line("g", errs((48.5, 50, 60, 70)), **fv.PASS["fresh"]["verl"])
    assert "does not pass" in fv.group_line(
        "g", errs((49.5, 50, 60, 70)), **fv.PASS["fresh"]["verl"]
    )


def test_console_only_reads_no_tensorboard_run(tmp_path, monkeypatch):
    monkeypatch.setattr(fv, "TB_SHARED", tmp_path / "no_shared" / "tb")
    logs = tmp_path / "unseen"
    logs.mkdir()
    lines = [
        f"step:{s} - response_length/mean:{150 + s % 3} - response_length/max:512"
        for s in range(1, 105)
    ]
    (logs / "run.log").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert fv.main(["--out", str(out), "--only", "console", "--console-dir", str(logs)]) == 0
    summary = (out / "summary.md").read_text()
    assert summary.startswith("verl runs (console logs in unseen; forecast model local-level)")
    assert "TensorBoard" not in summary and "q3b_fsdp_base" not in summary
    assert sorted(p.name for p in out.glob("verl_*.csv")) == ["verl_run.csv"]


def test_console_only_without_a_log_is_refused(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit) as exc:
        fv.main(["--out", str(tmp_path / "o"), "--only", "console", "--console-dir", str(empty)])
    assert exc.value.code == 2
    assert not (tmp_path / "o" / "summary.md").exists()
