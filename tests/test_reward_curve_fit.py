"""Reward-curve fit of the learning model (calibration/fits/reward_curve_fit.py, verl_learning.py)
and `rolloutlab calibrate learning --verl-tb`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from rolloutlab.calibration.fits.reward_curve_fit import (
    expected_curve,
    fit_reward_curve,
    sampling_noise_sd,
)
from rolloutlab.sim.models.learning import LearningParams
from rolloutlab.sim.models.passrate import parse_pass_rate

from rolloutlab.cli import main
from tests.calib_helpers import SAMPLE_RUN, verl_row, write_events

MATH_FILE = Path(__file__).parents[1] / "sim" / "data" / "pass_rates" / "math_cot_100.json"


def test_without_learning_the_curve_is_the_beta_mean():
    curve = expected_curve(0.6, 1.4, 0.0, np.full(5, 1e-6), 5, 1e-6)
    assert curve == pytest.approx(np.full(5, 0.3), abs=1e-4)


def test_one_step_by_hand():
    # p0 = 0.5 almost surely (Beta(2000, 2000)): theta_1 = kappa * 2 * 0.25 * (1 - 1/4)
    c = expected_curve(2000.0, 2000.0, 1.0, np.array([2e-6, 1e-6]), 4, 1e-6)
    assert c[1] == pytest.approx(1 / (1 + np.exp(-0.375)), abs=1e-3)


@pytest.mark.parametrize("seed", [0, 1])
def test_fit_recovers_known_parameters_at_verl_noise(seed):
    a, b, kappa, G, B, T = 0.6, 0.3, 4.0, 5, 1024, 100
    lr = np.full(T, 1e-6)
    clean = expected_curve(a, b, kappa, lr, G, 1e-6)
    sd = sampling_noise_sd(a, b, kappa, lr, G, 1e-6, B)  # a batch of 1024 prompts x 5
    assert 0.003 < sd.mean() < 0.02
    y = np.clip(clean + np.random.default_rng(seed).normal(0, sd), 0, 1)
    f = fit_reward_curve(y, lr, G, 1e-6, dispersion=a + b)
    for name, true in (("a", a), ("b", b), ("kappa", kappa)):
        assert abs(f[name] - true) < max(4 * f["se"][name], 1e-3), name
    assert abs(f["kappa"] / kappa - 1) < 0.15
    assert f["rmse"] == pytest.approx(np.sqrt(np.mean(sd**2)), rel=0.3)


def test_fit_rejects_bad_curves():
    with pytest.raises(ValueError, match="T >= 4"):
        fit_reward_curve(np.array([0.5, 0.6]), np.full(2, 1e-6), 5, 1e-6)
    with pytest.raises(ValueError, match="reward in"):
        fit_reward_curve(np.array([0.5, 0.6, 1.2, 0.7]), np.full(4, 1e-6), 5, 1e-6)


def test_cli_verl_tb_writes_both_blocks(tmp_path):
    out = tmp_path / "cal.json"
    r = CliRunner().invoke(
        main, ["calibrate", "learning", "--verl-tb", str(SAMPLE_RUN), "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    assert set(d) == {"pass_rate", "learning"}
    model = parse_pass_rate(d["pass_rate"]["spec"])
    assert model.spec.startswith("beta:")
    params = LearningParams.from_dict(d["learning"])
    assert params.lr_ref == 1e-6 and params.kappa > 0
    fit = d["learning"]["fit"]
    assert fit["steps"] == 105 and fit["first_step"] == 1
    # the run goes from 0.565 to 0.96: the model must explain most of it
    assert fit["r2_vs_constant"] > 0.5 and fit["rmse"] < 0.05
    assert d["pass_rate"]["provenance"]["assumed"]["group_size"] == 5


def test_naive_curves_by_hand():
    from rolloutlab.calibration.fits.verl_learning import naive_curves

    # fit curve 0.2, 0.4, 0.6 at steps 1-3: mean 0.4, last 0.6, line 0.2 step
    c = naive_curves(np.array([1, 2, 3]), np.array([0.2, 0.4, 0.6]), np.array([2, 4]))
    np.testing.assert_allclose(c["constant"], [0.4, 0.4])
    np.testing.assert_allclose(c["persistence"], [0.6, 0.6])
    np.testing.assert_allclose(c["linear"], [0.4, 0.8])
    assert c["lookup"][0] == 0.4 and np.isnan(c["lookup"][1])  # step 4 not in the fit run


def test_cli_verl_tb_check_scores_the_naive_rules(tmp_path):
    out = tmp_path / "cal.json"
    kept_back = SAMPLE_RUN.parent / "q3b_mcore_base"
    args = ["--verl-tb", str(SAMPLE_RUN), "--check", str(kept_back), "--out", str(out)]
    r = CliRunner().invoke(main, ["calibrate", "learning", *args])
    assert r.exit_code == 0, r.output
    (h,) = json.loads(out.read_text())["learning"]["fit"]["heldout"]
    assert set(h["baselines_rmse"]) == {"constant", "persistence", "linear", "lookup"}
    # the same recipe and model on another backend: the fit run's own curve, replayed
    # step by step, is closer than the fitted law (docs/learning.md says so)
    assert h["best_naive"] == "lookup" and h["baselines_rmse"]["lookup"] < h["rmse"]
    assert "q3b_mcore_base: RMSE" in r.output and "does NOT beat it" in r.output


def test_cli_verl_tb_missing_reward_tag(tmp_path):
    run = tmp_path / "norew"
    write_events(run, {s: verl_row(s, actor__lr=1e-6) for s in range(1, 8)})
    out = tmp_path / "cal.json"
    r = CliRunner().invoke(
        main, ["calibrate", "learning", "--verl-tb", str(run), "--out", str(out)]
    )
    assert r.exit_code == 2
    msg = r.output.strip().splitlines()
    assert len(msg) == 1 and str(run) in msg[0] and "critic/score/mean" in msg[0]
    assert not out.exists()


def test_cli_needs_exactly_one_source(tmp_path):
    out = tmp_path / "cal.json"
    for args in ([], ["--real", str(tmp_path), "--verl-tb", str(SAMPLE_RUN)]):
        r = CliRunner().invoke(main, ["calibrate", "learning", *args, "--out", str(out)])
        assert r.exit_code == 2 and "exactly one" in r.output
    assert not out.exists()


def test_math_pass_rate_file_is_a_pass_rate_spec():
    model = parse_pass_rate(str(MATH_FILE))
    assert model.spec == "beta:0.3073,0.02855" and model.coupling == pytest.approx(-0.5751)
