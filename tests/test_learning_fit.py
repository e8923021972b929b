"""Learning fit (calibration/fits/learning_fit.py, run_curve.py) and `rolloutlab calibrate learning`."""

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from rolloutlab.calibration.fits.learning_fit import (
    beta_logit_grid,
    fit_learning,
    mixed_count_pmf,
    replay_shift,
    simulate_curve,
)
from rolloutlab.calibration.readers.run_curve import RunCurve, read_run
from rolloutlab.sim.trace import schema as trace
from scipy import special, stats

from rolloutlab.cli import main


def test_replay_shift_by_hand():
    counts = [np.array([1, 3]), np.array([4, 1]), np.array([2, 2])]
    plain = RunCurve(np.full(3, 4), np.full(3, 1e-6), counts, dynamic_sampling=False)
    # variances: 1/4 * 3/4 = 3/16 for k = 1 or 3; 0 for k = 4; 1/4 for k = 2
    assert replay_shift(plain, 1e-6) == pytest.approx([0, 3 / 16, 3 / 16 + 3 / 32])
    ds = RunCurve(np.full(3, 4), np.full(3, 2e-6), counts, dynamic_sampling=True)
    # lr = 2 lr_ref; dynamic sampling trains only [1] at step 1 (loss over 1 group)
    assert replay_shift(ds, 1e-6) == pytest.approx([0, 2 * 3 / 16, 2 * 3 / 16 + 2 * 3 / 16])


@given(
    G=st.integers(1, 40),
    logit=hnp.arrays(float, st.tuples(st.integers(1, 4), st.integers(1, 6)),
                     elements=st.floats(-700.0, 700.0)),
    data=st.data(),
)  # fmt: skip
def test_mixed_count_pmf_is_scipys_binomial_pmf_mixed(G, logit, data):
    """The running-product pmf equals scipy's binomial pmf, mixed by the same weights, to
    1e-12 relative (absolutely below 1e-300, where products leave the normal floats). The
    pass rates are sigmoids of logits, as the fits make them (+-700: p from 1e-304 to 1;
    scipy's pmf overflows near the smallest normal p)."""
    p = special.expit(logit)  # (T, Q)
    w = data.draw(hnp.arrays(float, p.shape[1], elements=st.floats(0.0, 1.0)))
    plain = stats.binom.pmf(np.arange(G + 1), G, p[..., None])  # (T, Q, G + 1)
    np.testing.assert_allclose(
        mixed_count_pmf(G, p, w), np.einsum("tqj,q->tj", plain, w), rtol=1e-12, atol=1e-300
    )


def test_beta_logit_grid_moments():
    u, w = beta_logit_grid(0.3, 2.0)
    assert w @ (1 / (1 + np.exp(-u))) == pytest.approx(0.3 / 2.3, rel=1e-4)


def test_fit_recovers_kappa_from_the_models_own_run():
    curve = simulate_curve(2.0, 0.8, 0.6, G=8, B=32, T=30, lr=1e-6, seed=1, dynamic_sampling=True)
    fit = fit_learning(curve, init_steps=3)
    assert abs(fit["kappa"] - 2.0) < 4 * fit["fit"]["se"]["kappa"]
    assert fit["fit"]["se"]["kappa"] < 0.5  # informative
    assert fit["lr_ref"] == 1e-6


def write_run(d, curve: RunCurve, learner: bool = True):
    d.mkdir()
    rows, steps, lines = [], [], []
    for t, (G, lr, k) in enumerate(zip(curve.G, curve.lr, curve.counts, strict=True)):
        for i in range(k.size):
            for j in range(G):
                rows.append(dict(run_id="r", step=t, prompt_id=t * k.size + i, sample_idx=j,
                                 group_size=int(G), policy_version=t, learner_version=t,
                                 prompt_tokens=5, response_tokens=10, finish_reason="stop",
                                 worker=0, t_submit=float(t), t_first_token=t + 0.1,
                                 t_finish=t + 0.5))  # fmt: skip
        steps.append(dict(run_id="r", step=t, t_start=float(t), t_end=t + 1.0, gen_time=0.5,
                          train_time=0.4, sync_time=0.1, lr=float(lr), reward_mean=None, kl=None,
                          grad_norm=None, grad_cosine=None, controller_state="{}"))  # fmt: skip
        lines.append(json.dumps({"step": t, "G": int(G), "group_correct": k.tolist()}))
    trace.write_parquet(pl.DataFrame(rows, schema=trace.ROLLOUT_SCHEMA), d / "rollouts.parquet", "rollouts")  # fmt: skip
    trace.write_parquet(pl.DataFrame(steps, schema=trace.STEP_SCHEMA), d / "steps.parquet", "steps")
    (d / "config.json").write_text(json.dumps({"config": {"dynamic_sampling": curve.dynamic_sampling}}))  # fmt: skip
    if learner:
        (d / "learner.jsonl").write_text("\n".join(lines) + "\n")


def test_read_run_round_trip(tmp_path):
    curve = simulate_curve(1.0, 1.0, 1.0, G=4, B=6, T=8, lr=3e-4, seed=0, dynamic_sampling=True)
    write_run(tmp_path / "run", curve)
    back = read_run(tmp_path / "run")
    assert back.dynamic_sampling
    assert np.array_equal(back.G, curve.G) and np.array_equal(back.lr, curve.lr)
    assert all(np.array_equal(a, b) for a, b in zip(back.counts, curve.counts, strict=True))


def test_cli_learning(tmp_path):
    curve = simulate_curve(1.0, 1.0, 1.0, G=4, B=8, T=10, lr=3e-4, seed=0)
    write_run(tmp_path / "run", curve)
    out = tmp_path / "l.json"
    args = ["calibrate", "learning", "--real", str(tmp_path / "run"), "--out", str(out),
            "--mean-field"]  # fmt: skip
    r = CliRunner().invoke(main, [*args, "--as-lr-ref", "1e-6"])
    assert r.exit_code == 0, r.output
    block = json.loads(out.read_text())["learning"]
    assert block["lr_ref"] == 1e-6 and block["fit"]["lr_of_run"] == 3e-4
    assert "--as-lr-ref 1e-06" in block["provenance"]["command"]
    assert block["theta_max"] is None and block["fit"]["model"] == "linear"
    out3 = tmp_path / "l3.json"
    r = CliRunner().invoke(main, ["calibrate", "learning", "--real", str(tmp_path / "run"),
                                  "--out", str(out3), "--learning-model", "saturating",
                                  "--mean-field"])  # fmt: skip
    assert r.exit_code == 0, r.output
    sat = json.loads(out3.read_text())["learning"]
    assert sat["fit"]["model"] == "saturating" and sat["theta_max"] > 0
    assert "--learning-model saturating" in sat["provenance"]["command"]
    write_run(tmp_path / "bare", curve, learner=False)
    out2 = tmp_path / "l2.json"
    r = CliRunner().invoke(main, ["calibrate", "learning", "--real", str(tmp_path / "bare"),
                                  "--out", str(out2)])  # fmt: skip
    assert r.exit_code == 2 and "learner.jsonl" in r.output and "'correct'" in r.output
    assert not out2.exists()


def test_saturating_fit_recovers_the_capacity_and_the_likelihood_ratio_rejects_linear():
    curve = simulate_curve(
        3.0, 1.0, 1.0, G=8, B=16, T=40, lr=1e-6, seed=3, dynamic_sampling=True, theta_max=1.0
    )
    fit = fit_learning(curve, model="saturating")
    assert fit["fit"]["model"] == "saturating"
    assert abs(fit["theta_max"] - 1.0) < 4 * fit["fit"]["se"]["theta_max"]
    assert fit["fit"]["likelihood_ratio_vs_linear"]["p_value"] < 0.05
    assert fit["fit"]["loglik"] >= fit["fit"]["likelihood_ratio_vs_linear"]["loglik_linear"]
    short = simulate_curve(1.0, 1.0, 1.0, G=4, B=8, T=6, lr=1e-6, seed=0)
    assert fit_learning(short)["theta_max"] is None  # linear: no capacity
    with pytest.raises(ValueError, match="learning model"):
        fit_learning(short, model="cubic")


def test_drawn_runs_start_at_the_beta_mean_and_refuse_a_collapse():
    from rolloutlab.calibration.fits.learning_draws import draw_rewards
    from rolloutlab.sim.models.learning import LearningParams

    T, rng = 3, np.random.default_rng(0)
    args = (np.full(T, 8), np.full(T, 1e-6), np.full(T, 16), True, 2000, rng)
    r = draw_rewards(LearningParams(kappa=0.0, lr_ref=1e-6), 0.8, 1.2, *args)
    assert r.shape == (2000, T)
    se = np.sqrt(0.4 * 0.6 / (2000 * 16))  # at least the prompt-level sd of the mean
    assert abs(r.mean() - 0.4) < 8 * se
    up = draw_rewards(LearningParams(kappa=5.0, lr_ref=1e-6), 0.8, 1.2, *args)
    assert up[:, -1].mean() > r[:, -1].mean() + 0.05  # learning raises the reward
    with pytest.raises(ValueError, match="collapses"):  # lr far past the on-policy boundary
        draw_rewards(LearningParams(kappa=1.0, lr_ref=1e-6), 0.8, 1.2, np.full(T, 8),
                     np.full(T, 1e-3), np.full(T, 16), True, 10, rng)  # fmt: skip
