"""calibration.fits.groups_fit: the hierarchical censored lognormal recovers its parameters."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from rolloutlab.calibration.fits.groups_fit import fit_groups
from rolloutlab.sim.models.lengths import LognormalLengths


def draw(mu, sp, sw, cap, n_groups, G, seed, growth=0.0, steps=1):
    model = LognormalLengths(mu, sp, sw, cap, mu_growth_per_step=growth)
    rng = np.random.default_rng(seed)
    per = n_groups // steps
    groups = [g for t in range(steps) for g in model.sample(rng, per, G, t)]
    at = [t for t in range(steps) for _ in range(per)]
    return groups, [g >= cap for g in groups], at


@settings(max_examples=8, deadline=None)
@given(
    sp=st.floats(0.1, 0.9),
    sw=st.floats(0.1, 0.9),
    mu=st.floats(4.0, 6.0),
    seed=st.integers(0, 2**31),
)
def test_fit_recovers_between_and_within_split_within_its_standard_error(sp, sw, mu, seed):
    # Away from the boundary sigma = 0, where the MLE sits on the edge and the Hessian
    # standard error is not valid (found: sp = 0.10, sw = 0.5 fitted sigma_prompt ~ 0 with
    # SE 6e-4), and away from integer rounding of very short lengths (mu >= 4).
    assume(0.4 <= sp / sw <= 2.5)
    cap = int(np.exp(mu + 1.5 * np.hypot(sp, sw)))  # ~7 % censored
    groups, cens, _ = draw(mu, sp, sw, cap, 150, 6, seed)
    f = fit_groups(groups, cens)
    icc = sp**2 / (sp**2 + sw**2)
    for name, true in (("sigma_prompt", sp), ("sigma_within", sw), ("mu0", mu), ("icc", icc)):
        assert abs(getattr(f, name) - true) <= 4 * f.se[name], (name, getattr(f, name), true)


def test_censoring_is_modelled_not_ignored():
    # cap at about the median: half the lengths censored
    groups, cens, _ = draw(5.0, 0.5, 0.5, int(np.exp(5.0)), 300, 6, seed=3)
    assert 0.35 < np.mean(np.concatenate(cens)) < 0.65
    good = fit_groups(groups, cens)
    naive = fit_groups(groups)  # the capped lengths taken as exact
    assert abs(good.sigma_within - 0.5) <= 4 * good.se["sigma_within"]
    assert abs(naive.sigma_within - 0.5) > 10 * good.se["sigma_within"]


def test_drift_and_anova_cross_check():
    groups, cens, at = draw(4.0, 0.4, 0.3, 10**6, 400, 5, seed=1, growth=0.02, steps=20)
    f = fit_groups(groups, cens, at)
    assert abs(f.mu_growth_per_step - 0.02) <= 4 * f.se["mu_growth_per_step"]
    assert abs(f.icc - f.icc_anova) < 0.05  # nothing censored: ANOVA ICC agrees
    assert f.n_groups == 400 and f.n_samples == 2000 and f.n_censored == 0 and f.converged
