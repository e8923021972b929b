"""The noise law's fit on runs at several (G, B) settings and `calibrate learning --real` over them."""

import json

import numpy as np
import pytest
from click.testing import CliRunner
from rolloutlab.calibration.fits.learning_fit import simulate_counts
from rolloutlab.calibration.fits.learning_noise_fit import (
    cumulative,
    fit_noise_law,
    replay_terms,
    rho_identified,
    settings,
)
from rolloutlab.calibration.readers.run_curve import RunCurve
from rolloutlab.sim.models.learning import LearningParams

from rolloutlab.cli import main
from tests.test_learning_fit import write_run


def _run(params, G, B, T, seed):
    rng = np.random.default_rng(seed)
    Gs, lr = np.full(T, G), np.full(T, 1e-6)
    counts = simulate_counts(params, 0.6, 0.9, Gs, lr, np.full(T, B), True, rng)
    return RunCurve(Gs, lr, counts, dynamic_sampling=True)


def test_replay_terms_by_hand():
    counts = [np.array([1, 4]), np.array([2, 2])]
    c = RunCurve(np.full(2, 4), np.full(2, 1e-6), counts, dynamic_sampling=True)
    g, n = replay_terms(c, 1e-6, "std")
    # step 0: one informative group (k = 1: s = 3/16, sqrt = 0.433), loss over it; 4 samples
    assert g == pytest.approx([np.sqrt(3 / 16), 0.5])
    assert n == pytest.approx([4, 8])
    # b_noise = 4: step 0 keeps 4 / 8 of its drive
    assert cumulative(g, n, 4.0) == pytest.approx([0, np.sqrt(3 / 16) / 2])


def test_one_setting_is_refused_in_one_line():
    p = LearningParams(kappa=1.0, b_noise=10.0, advantage="std")
    runs = [_run(p, 4, 8, 8, s) for s in range(2)]
    assert settings(runs) == [(4, 8)]
    with pytest.raises(ValueError, match=r"two or more \(G, B\) settings.*G=4, B=8"):
        fit_noise_law(runs)


def test_fit_separates_kappa_and_b_noise_across_settings():
    # kappa 1.5, b_noise 40 informative samples; G = 2 and 16 at B = 16
    true = LearningParams(kappa=1.5, b_noise=40.0, advantage="std")
    runs = [_run(true, G, 16, 20, G) for G in (2, 16)]
    fit = fit_noise_law(runs, model="linear")
    assert fit["fit"]["settings"] == [{"G": 2, "B": 16}, {"G": 16, "B": 16}]
    assert fit["fit"]["loglik"] >= fit["fit"]["loglik_mean_field"] - 1.0
    assert 0.5 < fit["kappa"] < 5 and 5 < fit["b_noise"] < 400
    assert LearningParams.from_dict(fit).b_noise == fit["b_noise"]


def test_cli_two_settings_from_a_folder_and_one_setting_refused(tmp_path):
    p = LearningParams(kappa=1.0, b_noise=20.0, advantage="std")
    (tmp_path / "grid").mkdir()
    for G in (2, 8):
        write_run(tmp_path / "grid" / f"g{G}", _run(p, G, 8, 12, G))
    out = tmp_path / "l.json"
    r = CliRunner().invoke(main, ["calibrate", "learning", "--real", str(tmp_path / "grid"),
                                  "--out", str(out), "--learning-model", "linear"])  # fmt: skip
    assert r.exit_code == 0, r.output
    block = json.loads(out.read_text())["learning"]
    assert block["b_noise"] > 0 and block["advantage"] == "std"
    assert len(block["provenance"]["run_dir"]) == 2
    one = tmp_path / "one.json"
    r = CliRunner().invoke(main, ["calibrate", "learning", "--real", str(tmp_path / "grid" / "g2"),
                                  "--out", str(one)])  # fmt: skip
    assert r.exit_code == 2 and "two or more (G, B) settings" in r.output
    assert len(r.output.strip().splitlines()) == 1 and not one.exists()


def test_the_fit_does_not_depend_on_the_order_of_its_runs():
    """The same four runs in two orders give the same optimum, to the last digit (without
    the canonical order they differ from the sixth digit on)."""
    true = LearningParams(kappa=1.0, b_noise=20.0, advantage="std")
    runs = [_run(true, G, 8, 12, 10 * G + s) for G in (2, 8) for s in range(2)]
    a = fit_noise_law(runs, model="linear")
    b = fit_noise_law(runs[::-1], model="linear")
    for k in ("kappa", "b_noise"):
        assert a[k] == b[k]
    assert a["fit"]["loglik"] == b["fit"]["loglik"]


def test_rho_is_fitted_only_where_the_settings_identify_it():
    assert not rho_identified([(4, 4), (16, 16)])  # two settings: two gains, three constants
    assert not rho_identified([(4, 4), (4, 8), (4, 16)])  # one G: rho rescales b_noise
    assert rho_identified([(4, 4), (16, 4), (4, 16)])
    true = LearningParams(kappa=1.0, b_noise=20.0, advantage="std", rho=0.5)
    two = [_run(true, G, 8, 12, G) for G in (2, 8)]
    fit = fit_noise_law(two, model="linear")
    assert fit["rho"] == 0.0 and fit["fit"]["rho_fitted"] is False


@pytest.mark.slow(reason="two noise-law fits with rho, six 40-step runs each: 17 CPU-s at load 9")
def test_fit_recovers_the_design_effect_on_an_l_shaped_grid():
    """Runs drawn with rho = 0.6 at (2, 4), (16, 4) and (2, 32): the fit finds rho well
    above 0 and a better likelihood than rho = 0; drawn with rho = 0, it stays near 0."""
    out = {}
    for rho in (0.6, 0.0):
        true = LearningParams(kappa=2.0, b_noise=60.0, advantage="std", rho=rho)
        runs = [_run(true, G, B, 40, 100 * G + B + s) for G, B in ((2, 4), (16, 4), (2, 32))
                for s in range(2)]  # fmt: skip
        out[rho] = fit_noise_law(runs, model="linear")
    hi, lo = out[0.6], out[0.0]
    assert hi["fit"]["rho_fitted"] and hi["fit"]["loglik"] >= hi["fit"]["loglik_rho_0"]
    assert hi["rho"] > 0.25
    assert lo["rho"] < hi["rho"] - 0.2
    assert LearningParams.from_dict(hi).rho == hi["rho"]
