"""The §2 scaling laws, measured on simulated runs (PAPERS.md §2; docs/staleness.md)."""

import dataclasses

import numpy as np
import pytest
from rolloutlab.sim.models.staleness import StalenessParams, feedback_factor, simulate_batch
from rolloutlab.sim.studies.stability import measure_eta_max, run_grid

P = StalenessParams()
C_SAFE = P.R_batch / (feedback_factor(P) * P.G_on)  # closed-form S * eta_max


def test_S_times_eta_max_is_constant_in_stale_rollout_regime():
    # T = 200 keeps the horizon constraint (R_crit / T = 0.125) far from binding.
    S = np.array([4, 8, 16, 32])
    s_eta = S * measure_eta_max(P, S, T=200, seeds=8, lo=1e-4, hi=0.5, iters=12)
    assert s_eta.max() / s_eta.min() < 1.15
    assert s_eta == pytest.approx(np.full(4, C_SAFE), rel=0.1)


@pytest.fixture(scope="module")
def horizon_runs():
    # Small lr, where the lag bias (L_lag * lr * S ~ 0.06) barely speeds the drift.
    p = dataclasses.replace(P, R_crit=5.0)
    lrs = np.geomspace(5e-4, 2e-3, 4)
    out = {}
    for S in (1, 2, 4):
        rs = simulate_batch(p, S, np.repeat(lrs, 4), 20_000, np.tile(np.arange(4), 4))
        out[S] = np.array([[r.t_collapse, r.M_collapse] for r in rs], float).reshape(4, 4, 2)
        assert {r.failure for r in rs} == {"horizon"}
    return p, lrs, out


def test_t_collapse_scales_as_one_over_lr_in_horizon_regime(horizon_runs):
    _, lrs, out = horizon_runs
    for S, tm in out.items():
        slope = np.polyfit(np.log(lrs), np.log(np.median(tm[..., 0], 1)), 1)[0]
        assert slope == pytest.approx(-1.0, abs=0.08), S


def test_t_collapse_is_independent_of_S_in_horizon_regime(horizon_runs):
    _, _, out = horizon_runs
    t1 = np.median(out[1][..., 0], 1)
    for S in (2, 4):
        assert np.median(out[S][..., 0], 1) == pytest.approx(t1, rel=0.1)


def test_M_collapse_times_S_times_lr_is_constant(horizon_runs):
    p, lrs, out = horizon_runs
    mse = np.concatenate([np.median(tm[..., 1], 1) * S * lrs for S, tm in out.items()])
    assert mse == pytest.approx(np.full(mse.size, p.R_crit / p.G_on), rel=0.12)


def test_ballistic_when_collapsing_stale_diffusive_when_deep_stable():
    df = run_grid(P, [2, 8, 32], np.geomspace(1e-3, 0.3, 13), 1000, 3)
    x = (df["S"] * df["lr"] / C_SAFE).to_numpy()
    horizon = (df["lr"] / (P.R_crit / 1000 / P.G_on)).to_numpy()
    cos = df["cos_sim_mean"].to_numpy()
    unstable = (x >= 2) & (df["t_collapse"].fill_null(0).to_numpy() >= 2)
    stable = (x <= 0.25) & (horizon <= 0.5)
    assert unstable.sum() > 10 and stable.sum() > 10
    assert (df["failure"].to_numpy()[unstable] == "stale_rollout").all()
    assert cos[unstable].mean() > 0.85 and cos[unstable].min() > 0.6
    assert cos[stable].mean() < 0.25 and cos[stable].max() < 0.35
    assert (df["regime"].to_numpy()[stable] == "diffusive").all()
