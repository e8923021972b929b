"""sim.models.within_law and the heavier-tailed hierarchical fits (calibration.fits.groups_fit with
``law``): the laws against scipy.stats, common random numbers, recovery of parameters from
data drawn from the model (censored at the cap), and the AIC choice."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.calibration.fits.groups_fit import fit_groups, fit_groups_law
from rolloutlab.sim.models.lengths import LognormalLengths
from rolloutlab.sim.models.within_law import from_normal, log_interval
from rolloutlab.sim.scenario.scenario import CalibrationError, scenario_from_dict
from scipy import integrate, stats

SIM_DATA = Path(__file__).parent.parent / "sim" / "data"
GUMBEL = stats.gumbel_r(loc=-np.euler_gamma * np.sqrt(6) / np.pi, scale=np.sqrt(6) / np.pi)
"""The standardised Gumbel by scipy's parametrisation (mean 0, variance 1)."""


def scipy_law(law: str, df: float):
    return {"normal": stats.norm(), "gumbel": GUMBEL, "t": stats.t(df)}[law]


def test_gumbel_is_standardised():
    assert GUMBEL.mean() == pytest.approx(0.0, abs=1e-12)
    assert GUMBEL.var() == pytest.approx(1.0, rel=1e-12)
    x = np.linspace(-3, 3, 13)  # our quantile map against scipy's quantile function
    np.testing.assert_allclose(from_normal(x, "gumbel"), GUMBEL.ppf(stats.norm.cdf(x)))


@settings(max_examples=30, deadline=None)
@given(
    law=st.sampled_from(["normal", "gumbel", "t"]),
    df=st.floats(0.6, 30.0),
    z=st.floats(-6.0, 6.0),
)
def test_quantile_map_matches_scipy(law, df, z):
    want = scipy_law(law, df).ppf(stats.norm.cdf(z))
    assert from_normal(np.array([z]), law, df)[0] == pytest.approx(want, rel=1e-6, abs=1e-9)


@settings(max_examples=30, deadline=None)
@given(
    law=st.sampled_from(["normal", "gumbel", "t"]),
    df=st.floats(0.6, 30.0),
    lo=st.floats(-8.0, 8.0),
    width=st.floats(1e-3, 5.0),
)
def test_log_interval_matches_scipy(law, df, lo, width):
    d = scipy_law(law, df)
    hi = lo + width
    # scipy's difference of survival functions above 0 and of CDFs below: accurate both sides
    want = np.log(d.sf(lo) - d.sf(hi)) if lo > 0 else np.log(d.cdf(hi) - d.cdf(lo))
    got = log_interval(np.array([lo]), np.array([hi]), law, df)[0]
    assert got == pytest.approx(want, rel=1e-6, abs=1e-9)
    # open ends: a censored length (hi = inf) and the shortest one (lo = -inf)
    assert log_interval(np.array([lo]), np.array([np.inf]), law, df)[0] == pytest.approx(
        d.logsf(lo), rel=1e-6, abs=1e-9
    )
    assert log_interval(np.array([-np.inf]), np.array([hi]), law, df)[0] == pytest.approx(
        d.logcdf(hi), rel=1e-6, abs=1e-9
    )


def test_log_interval_far_in_the_upper_tail_is_finite():
    # a difference of CDFs would be 1 - 1 = 0 here
    got = log_interval(np.array([12.0]), np.array([12.5]), "normal")[0]
    assert np.isfinite(got) and got == pytest.approx(
        np.log(stats.norm.sf(12) - stats.norm.sf(12.5))
    )


@pytest.mark.parametrize("law,df", [("gumbel", 0.0), ("t", 1.5)])
def test_draws_keep_common_random_numbers_and_the_law(law, df):
    m = LognormalLengths(3.0, 0.3, 0.5, 10**6, within_law=law, within_df=df)
    ids = np.arange(500)
    small, big = m.sample_ids(1, 4, ids, 3), m.sample_ids(1, 4, ids, 8)
    np.testing.assert_array_equal(small, big[:, :3])  # sample j the same whatever G
    # without a prompt effect, (log L - mu) / sigma_within follows the law (L ~ 2e4:
    # rounding up to an integer moves log L by < 5e-5)
    wide = LognormalLengths(10.0, 0.0, 0.5, 10**12, within_law=law, within_df=df)
    e = (np.log(wide.sample_ids(2, 0, np.arange(4000), 1)[:, 0]) - 10.0) / 0.5
    assert stats.kstest(e, scipy_law(law, df).cdf).pvalue > 0.01


def test_unknown_law_and_bad_df_are_refused():
    with pytest.raises(ValueError, match="within-group law"):
        LognormalLengths(3.0, 0.3, 0.5, 100, within_law="cauchy")
    with pytest.raises(ValueError, match="degrees of freedom"):
        LognormalLengths(3.0, 0.3, 0.5, 100, within_law="t", within_df=0.0)
    with pytest.raises(ValueError, match="within-group law"):
        fit_groups([np.array([1, 2]), np.array([3, 4])], law="lognormal")


def draw(law, df, mu, sp, sw, cap, n_groups, G, seed):
    m = LognormalLengths(mu, sp, sw, cap, within_law=law, within_df=df)
    groups = list(m.sample(np.random.default_rng(seed), n_groups, G))
    return groups, [g >= cap for g in groups]


@settings(max_examples=6, deadline=None)
@given(
    law=st.sampled_from(["gumbel", "t"]),
    df=st.floats(1.2, 6.0),
    sp=st.floats(0.2, 0.6),
    sw=st.floats(0.2, 0.6),
    seed=st.integers(0, 2**31),
)
def test_fit_recovers_parameters_of_data_drawn_from_the_model(law, df, sp, sw, seed):
    mu = 4.5
    cap = int(np.exp(mu + 2.5 * sw + sp))  # a few per cent censored (many more under t)
    groups, cens = draw(law, df, mu, sp, sw, cap, 80, 5, seed)
    f = fit_groups(groups, cens, law=law)
    checks = [("mu0", mu), ("sigma_prompt", sp), ("sigma_within", sw)]
    if law == "t":
        assert f.within_law == "t" and f.se["within_df"] is not None
        checks.append(("within_df", df))
    for name, true in checks:
        assert abs(getattr(f, name) - true) <= 4.5 * f.se[name], (name, getattr(f, name), true)


def test_censored_fit_handles_the_cap_under_a_heavy_tail():
    # cap near the 70th percentile: ~30 % censored; dropping the censoring biases the fit
    groups, cens = draw("t", 2.0, 4.0, 0.3, 0.5, int(np.exp(4.3)), 100, 4, seed=4)
    assert 0.2 < np.mean(np.concatenate(cens)) < 0.45
    good = fit_groups(groups, cens, law="t")
    naive = fit_groups(groups, law="t")
    assert abs(good.sigma_within - 0.5) <= 4 * good.se["sigma_within"]
    assert abs(good.within_df - 2.0) <= 4 * good.se["within_df"]
    assert (
        abs(naive.within_df - 2.0) > 4 * good.se["within_df"]
        or abs(naive.sigma_within - 0.5) > 4 * good.se["sigma_within"]
    )


def test_aic_picks_the_law_the_data_were_drawn_from():
    heavy, hc = draw("t", 1.5, 4.0, 0.3, 0.4, 10**6, 50, 4, seed=2)
    best, aics = fit_groups_law(heavy, hc, None, "auto")
    assert set(aics) == {"normal", "gumbel", "t"} and best.within_law == "t"
    assert aics["normal"] - aics["t"] > 20
    light, lc = draw("normal", 0.0, 4.0, 0.3, 0.4, 10**6, 50, 4, seed=2)
    assert fit_groups_law(light, lc, None, "auto")[0].within_law in ("normal", "t")
    best, _ = fit_groups_law(light, lc, None, "auto")
    if best.within_law == "t":  # a t that large is the normal
        assert best.within_df > 20


def test_scenario_round_trip_keeps_the_law():
    d = json.loads((SIM_DATA / "gsm8k.json").read_text())
    d["lengths"] = {
        "kind": "lognormal",
        "mu": 3.0,
        "sigma_prompt": 0.3,
        "sigma_within": 0.4,
        "max_response_length": 72,
        "within_law": "t",
        "within_df": 1.7,
    }
    s = scenario_from_dict(d, "x.json")
    assert s.lengths.within_law == "t" and s.lengths.within_df == 1.7
    d["lengths"]["within_law"] = "lognormal"
    with pytest.raises(CalibrationError, match="x.json: field 'lengths': within-group law"):
        scenario_from_dict(d, "x.json")
    del d["lengths"]["within_law"], d["lengths"]["within_df"]  # old files: the normal law
    assert scenario_from_dict(d, "x.json").lengths.within_law == "normal"


def test_gumbel_variance_by_quadrature():
    # mean 0, variance 1 by integrating the quantile map against the normal density
    f = lambda z, k: from_normal(np.array([z]), "gumbel")[0] ** k * stats.norm.pdf(z)
    assert integrate.quad(f, -12, 12, args=(1,))[0] == pytest.approx(0.0, abs=1e-6)
    assert integrate.quad(f, -12, 12, args=(2,))[0] == pytest.approx(1.0, abs=1e-6)
