"""Held-out time to target (`compare learning --target-on heldout`,
analysis/learning/heldout.py) and the drawn shift paths behind it."""

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.analysis.learning.compare import compare_learning
from rolloutlab.analysis.learning.heldout import eval_rows, measured_heldout
from rolloutlab.calibration.fits.learning_draws import (
    draw_paths,
    draw_rewards,
    population_pass_rate,
)
from rolloutlab.calibration.readers.run_curve import RunDataError
from rolloutlab.sim.models.learning import LearningParams
from scipy import special

from rolloutlab.cli import main
from tests.test_compare_learning import write_synthetic_run

# the same synthetic fit runs are fitted once per session (conftest.py says why)
pytestmark = pytest.mark.usefixtures("memoized_learning_fits")


@given(
    a=st.floats(0.2, 5.0), b=st.floats(0.2, 5.0), lo=st.floats(-4.0, 4.0), d=st.floats(0.01, 3.0)
)
@settings(max_examples=40, deadline=None)
def test_population_pass_rate_is_the_beta_mean_at_zero_and_rises_with_the_shift(a, b, lo, d):
    p = population_pass_rate(a, b, np.array([0.0, lo, lo + d]))
    assert p[0] == pytest.approx(a / (a + b), abs=2e-3)
    assert 0.0 < p[1] < p[2] < 1.0


def test_population_pass_rate_matches_monte_carlo():
    rng = np.random.default_rng(3)
    p0 = rng.beta(0.7, 1.9, 400_000)
    mc = special.expit(special.logit(p0) + 1.3).mean()
    assert population_pass_rate(0.7, 1.9, 1.3) == pytest.approx(mc, abs=2e-3)


@given(seed=st.integers(0, 10_000), b_noise=st.sampled_from([0.0, 5.0, 100.0]))
@settings(max_examples=20, deadline=None)
def test_drawn_shifts_never_fall_and_rewards_match_draw_rewards(seed, b_noise):
    """On-policy drive is >= 0 (signals >= 0, the noise a positive Gamma), so the shift of
    every drawn run is non-decreasing; the rewards are draw_rewards' for the same rng."""
    T = 30
    params = LearningParams(kappa=0.5, lr_ref=1e-6, b_noise=b_noise, advantage="std")
    args = (np.full(T, 8), np.full(T, 1e-6), np.full(T, 4), False, 16)
    reward, theta = draw_paths(params, 0.8, 1.2, *args, np.random.default_rng(seed))
    assert theta.shape == reward.shape == (16, T)
    assert np.all(np.diff(theta, axis=1) >= -1e-12) and np.all(theta >= 0)
    again = draw_rewards(params, 0.8, 1.2, *args, np.random.default_rng(seed))
    np.testing.assert_array_equal(reward, again)


def _evals(d, acc_by_step):
    rows = [{"step": -1, "t_s": 0.0, "accuracy": 0.1}]
    rows += [{"step": s, "t_s": float(s), "accuracy": a} for s, a in acc_by_step]
    (d / "eval.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_measured_heldout_by_hand(tmp_path):
    _evals(tmp_path, [(9, 0.30), (19, 0.42), (29, 0.39), (39, 0.50)])
    steps = pl.DataFrame({"step": np.arange(40), "t_end": 2.0 * np.arange(1, 41)})
    ev = eval_rows(tmp_path)
    assert ev["step"].to_list() == [-1, 9, 19, 29, 39]
    assert measured_heldout(ev, steps, 0.40) == (40.0, 20)  # step 19 ends at 2 x 20 s
    assert measured_heldout(ev, steps, 0.45) == (80.0, 40)
    assert measured_heldout(ev, steps, 0.60) == (None, None)


@pytest.mark.parametrize(
    "line, field",
    [
        ('{"step": 3}', "accuracy"),
        ('{"accuracy": 0.4}', "step"),
        ('{"step": 3, "accuracy": "x"}', "accuracy"),
    ],
)
def test_a_bad_eval_row_names_file_line_and_field(tmp_path, line, field):
    (tmp_path / "eval.jsonl").write_text('{"step": -1, "accuracy": 0.1}\n' + line + "\n")
    with pytest.raises(RunDataError, match=rf"eval.jsonl: line 2: field '{field}'"):
        eval_rows(tmp_path)


@pytest.mark.slow(reason="one noise-law fit on two 40-step runs (G 4 and 16): 26 s CPU at load 24")
def test_heldout_target_on_synthetic_runs_and_the_cli(tmp_path):
    """Two settings fit the noise law; the measured crossing is the first evaluation at or
    above the target, and the prediction is scored at the same evaluation steps."""
    write_synthetic_run(tmp_path / "g4", 4, 0)
    write_synthetic_run(tmp_path / "g16", 16, 1)
    for name in ("g4", "g16"):
        _evals(tmp_path / name, [(9, 0.4), (19, 0.55), (29, 0.75), (39, 0.8)])
    table, _, curves, fit = compare_learning(
        [tmp_path / "g4", tmp_path / "g16"], [tmp_path / "g4", tmp_path / "g16"], 0.7,
        "linear", 30, clock="cpu", target_on="heldout",
    )  # fmt: skip
    assert fit["target_on"] == "heldout" and fit["fit"]["settings"] == [
        {"G": 4, "B": 16}, {"G": 16, "B": 16}
    ]  # fmt: skip
    assert table["measured_steps_to_target"].to_list() == [30, 30]
    pred = table["predicted_steps_to_target"].to_list()
    assert all(p is None or p in (10, 20, 30, 40) for p in pred)  # evaluation steps only
    measured, predicted = curves["g4"]
    assert measured["step"].to_list() == predicted["step"].to_list() == [9, 19, 29, 39]
    assert np.all(np.diff(predicted["reward_mean"].to_numpy()) >= -1e-12)
    base = ["compare", "learning", "--learning-model", "linear", "--draws", "5", "--clock", "cpu",
            "--fit", str(tmp_path / "g4"), "--fit", str(tmp_path / "g16"),
            "--real", str(tmp_path / "g4"), "--target-accuracy", "0.7"]  # fmt: skip
    res = CliRunner().invoke(main, [*base, "--target-on", "heldout", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "o" / "config.json").read_text())["target_on"] == "heldout"
    directions = pl.read_csv(tmp_path / "o" / "learning_directions.csv")
    assert directions.height == 0 and "agree" in directions.columns  # one real run: no pair
    (tmp_path / "g4" / "eval.jsonl").write_text('{"step": -1, "t_s": 0.0, "accuracy": 0.1}\n')
    res = CliRunner().invoke(main, [*base, "--target-on", "heldout", "--out", str(tmp_path / "o2")])
    assert res.exit_code == 2 and "no evaluation after a training step" in res.output


def _runs(rows):
    return pl.DataFrame(
        rows,
        schema=["G", "B", "measured_steps_to_target", "predicted_steps_to_target"],
        orient="row",
    )


def test_direction_table_by_hand():
    from rolloutlab.analysis.learning.directions import DIRECTION_COLUMNS, direction_table

    runs = _runs([
        (4, 4, 60, 50), (4, 4, 70, 50), (4, 4, 80, 50),   # mean 70, sd 10
        (8, 4, 40, 45), (8, 4, 50, 45), (8, 4, None, None),  # mean 45 (2 reached), sd 7.07
        (4, 8, 68, 49), (4, 8, 72, 49),                   # mean 70, sd 2.83
    ])  # fmt: skip
    t = direction_table(runs)
    assert t.columns == DIRECTION_COLUMNS and t.height == 2
    g = t.filter(pl.col("axis") == "G").row(0, named=True)
    assert (g["fixed"], g["low"], g["high"]) == ("B=4", 4, 8)
    assert g["measured_change"] == pytest.approx(-25.0)
    assert g["measured_se"] == pytest.approx(np.sqrt(100 / 3 + 50 / 2))
    assert g["predicted_change"] == pytest.approx(-5.0)
    assert g["resolved"] and g["agree"]  # 25 >= 2 x 7.64
    b = t.filter(pl.col("axis") == "B").row(0, named=True)
    assert (b["fixed"], b["measured_change"], b["predicted_change"]) == ("G=4", 0.0, -1.0)
    assert not b["resolved"] and not b["agree"]


def test_direction_table_needs_its_columns_and_is_empty_for_one_setting():
    from rolloutlab.analysis.learning.directions import direction_table

    assert direction_table(_runs([(4, 4, 10, 12), (4, 4, 14, 12)])).height == 0
    with pytest.raises(KeyError, match="'B'"):
        direction_table(pl.DataFrame({"G": [4], "measured_steps_to_target": [1],
                                      "predicted_steps_to_target": [1]}))  # fmt: skip


def test_evaluation_noise_makes_a_flat_curve_cross_earlier():
    """A law that sits just under the target never reaches it as a population pass rate,
    but a 64-problem evaluation's sampling error crosses it (the first passage the
    measured statistic is); n_eval < 1 is refused."""
    from rolloutlab.analysis.learning.heldout import predicted_heldout
    from rolloutlab.calibration.readers.run_curve import RunCurve

    T = 60
    curve = RunCurve(np.full(T, 8), np.full(T, 1e-6), [np.zeros(4, int)] * T, False)
    params = LearningParams(kappa=1e-4, lr_ref=1e-6)  # barely moves from the Beta mean 0.4
    at = np.arange(9, T, 10)
    exact, _ = predicted_heldout(params, (2.0, 3.0), curve, at, 0.42, 100, 0)
    noisy, median = predicted_heldout(params, (2.0, 3.0), curve, at, 0.42, 100, 0, n_eval=64)
    assert np.isnan(exact).all()
    assert np.mean(~np.isnan(noisy)) > 0.5 and set(noisy[~np.isnan(noisy)]) <= set(at + 1.0)
    assert median == pytest.approx(0.4, abs=0.01)
    with pytest.raises(ValueError, match="n_eval"):
        predicted_heldout(params, (2.0, 3.0), curve, at, 0.42, 10, 0, n_eval=0)


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"step": -1, "t_s": 0.0, "accuracy": 0.1}\n\n{"step": 9, "t_s": 1.0}\n',
         r"eval.jsonl: line 3: field 'accuracy' missing"),
        ('{"step": -1, "t_s": 0.0, "accuracy": 0.1}\n{"step": 9,\n',
         r"eval.jsonl: line 2: not JSON"),
    ],
)  # fmt: skip
def test_compare_learning_names_the_eval_line_that_is_bad(tmp_path, text, message):
    write_synthetic_run(tmp_path / "g4", 4, 0)
    write_synthetic_run(tmp_path / "g16", 16, 1)
    (tmp_path / "g16" / "eval.jsonl").write_text(text)
    res = CliRunner().invoke(main, ["compare", "learning", "--fit", str(tmp_path / "g4"),
                                    "--real", str(tmp_path / "g16"), "--target-accuracy", "0.7",
                                    "--out", str(tmp_path / "o")])  # fmt: skip
    assert res.exit_code == 2 and res.exception is not None
    assert len([ln for ln in res.output.splitlines() if "line" in ln]) >= 1
    import re

    assert re.search(message, res.output.replace("\n", " ")), res.output


def test_a_run_that_starts_above_the_target_is_noted(tmp_path):
    from rolloutlab.analysis.learning.heldout import started_above

    for name, start in (("low", 0.1), ("high", 0.5)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "eval.jsonl").write_text(
            json.dumps({"step": -1, "t_s": 0.0, "accuracy": start})
            + "\n"
            + json.dumps({"step": 9, "t_s": 1.0, "accuracy": 0.6})
            + "\n"
        )
    notes = started_above([tmp_path / "low", tmp_path / "high"], 0.4)
    assert len(notes) == 1 and "high starts at held-out accuracy 0.500 >= target 0.4" in notes[0]
