"""``compare groups --forecast`` end to end on the group-per-line fixture."""

from pathlib import Path

import polars as pl
from click.testing import CliRunner

from rolloutlab.cli import main

FIXTURE = "tests/data/packed_lengths"


def _run(*args):
    return CliRunner().invoke(main, ["compare", "groups", *args], catch_exceptions=False)


def test_forecast_writes_every_rule_beside_the_measured_p(tmp_path):
    out = tmp_path / "fc"
    res = _run(
        FIXTURE,
        FIXTURE,
        "--fit-steps",
        "2",
        "--tau",
        "1.5,2",
        "--forecast",
        "--draws",
        "10",
        "--reps",
        "10",
        "--out",
        str(out),
    )
    assert res.exit_code == 0, res.output
    cells = pl.read_csv(out / "forecast_cells.csv")
    assert cells.height == 4 * 2  # G = 1..4, two taus
    for col in ("p_meas", "p_forecast", "p_persistence", "p_linear", "p_static", "floor"):
        assert cells[col].is_between(0.0, 1.0).all()
    assert cells["floor"].max() == 0.0  # the other run is the same log
    span = pl.read_csv(out / "forecast_makespan.csv")
    assert span["step"].to_list() == [3]
    assert "persistence" in res.output and "floor" in res.output


def test_forecast_without_fit_steps_is_one_line(tmp_path):
    res = _run(FIXTURE, "--tau", "2", "--forecast", "--out", str(tmp_path / "x"))
    assert res.exit_code == 2
    assert "--forecast: needs --fit-steps" in res.output
    assert not (tmp_path / "x").exists()


def test_forecast_with_all_steps_fitted_is_refused(tmp_path):
    res = _run(
        FIXTURE, "--fit-steps", "3", "--tau", "2", "--forecast", "--out", str(tmp_path / "x")
    )
    assert res.exit_code == 2
    assert "--fit-steps 3: needs 2 <= K < 3" in res.output


def test_horizon_needs_forecast_and_limits_the_steps(tmp_path):
    res = _run(
        FIXTURE, *"--fit-steps 2 --tau 2 --forecast-steps 1 --out".split(), str(tmp_path / "x")
    )
    assert res.exit_code == 2
    assert "--forecast-steps: needs --forecast" in res.output
    logs = tmp_path / "logs"  # the fixture's three steps and a fourth, a copy of the third
    logs.mkdir()
    for step in (1, 2, 3):
        text = (Path(FIXTURE) / f"packed_lengths_step_{step}.jsonl").read_text()
        (logs / f"packed_lengths_step_{step}.jsonl").write_text(text)
    (logs / "packed_lengths_step_4.jsonl").write_text(text.replace('"step": 3', '"step": 4'))
    fast = "--fit-steps 2 --tau 2 --forecast --draws 5 --reps 5".split()
    for horizon, steps in ((["--forecast-steps", "1"], [3]), ([], [3, 4])):
        out = tmp_path / f"h{len(horizon)}"
        res = _run(str(logs), *fast, *horizon, "--out", str(out))
        assert res.exit_code == 0, res.output
        assert pl.read_csv(out / "forecast_makespan.csv")["step"].to_list() == steps


def test_forecast_model_needs_forecast_and_drift_still_runs(tmp_path):
    res = _run(FIXTURE, *"--fit-steps 2 --tau 2 --forecast-model drift --out".split(), "x")
    assert res.exit_code == 2
    assert "--forecast-model: needs --forecast" in res.output
    fast = "--fit-steps 2 --tau 2 --forecast --draws 5 --reps 5".split()
    for model in ("drift", "local-level"):
        out = tmp_path / model
        res = _run(FIXTURE, *fast, "--forecast-model", model, "--out", str(out))
        assert res.exit_code == 0, res.output
        assert f"forecast ({model})" in res.output
        assert pl.read_csv(out / "forecast_cells.csv")["p_forecast"].is_between(0, 1).all()


def test_the_verdict_names_the_best_naive_rule_and_the_margin():
    from rolloutlab.analysis.groups.compare import ForecastStudy

    # graph-walk seed 4's numbers (README): the forecast loses to persistence on P and on
    # the makespan, and beats the other seeds' mean by a hair
    study = ForecastStudy(
        cells=pl.DataFrame(), makespan=pl.DataFrame(), length_unit="tokens",
        errors={"forecast": 0.0731, "persistence": 0.0502, "linear": 0.142, "static": 0.426,
                "floor": 0.0774},
        makespan_errors={"forecast": 11.12, "persistence": 10.94, "linear": 12.1, "static": 13.4},
        meets=(50, 52),
    )  # fmt: skip
    assert study.verdict() == (
        "verdict: P(max/median > tau): forecast 0.073 does not beat the best naive rule, "
        "persistence, 0.050 (worse by 0.023); makespan: forecast 11.1 tokens does not beat the "
        "best naive rule, persistence, 10.9 tokens (worse by 0.2 tokens); P, lookup: forecast "
        "0.073 beats the other runs' mean 0.077 (better by 0.004)"
    )
    # a tie at the printed precision does not beat; the lowest rule is the one named
    tie = ForecastStudy(
        cells=pl.DataFrame(), makespan=pl.DataFrame(), length_unit="tokens",
        errors={"forecast": 0.1001, "persistence": 0.2, "linear": 0.0999, "static": 0.3},
        makespan_errors={"forecast": 5.0, "persistence": 9.0, "linear": 7.0, "static": 6.0},
        meets=(1, 1),
    )  # fmt: skip
    said = tie.verdict()
    assert (
        "forecast 0.100 does not beat the best naive rule, linear, 0.100 (worse by 0.000)" in said
    )
    assert (
        "forecast 5.0 tokens beats the best naive rule, static, 6.0 tokens (better by 1.0" in said
    )
    assert "lookup" not in said  # no other run, no lookup


def test_the_forecast_prints_its_verdict(tmp_path):
    fast = "--fit-steps 2 --tau 1.5,2 --forecast --draws 5 --reps 5".split()
    res = _run(FIXTURE, FIXTURE, *fast, "--out", str(tmp_path / "v"))
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("verdict: "))
    # the fixture's three steps score no (G, tau) cell in [0.05, 0.95]: P says so
    assert line.startswith("verdict: P(max/median > tau): no scored cell; makespan: forecast ")
    assert "the best naive rule, " in line
