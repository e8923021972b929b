"""SAGC with a prior straggler probability per G (e.g. a length model's forecast)."""

import pytest
from rolloutlab.sim.control.controllers import SAGC
from rolloutlab.sim.control.spec import parse_controller


def test_prior_p_sets_each_candidates_beta():
    c = SAGC(candidates=(16, 4, 8), prior_p=(0.1, 0.5, 0.9), prior_n=10.0)
    # ascending candidates 4, 8, 16: Beta(1 + 10 p, 1 + 10 (1 - p))
    assert c.alpha == pytest.approx({4: 2.0, 8: 6.0, 16: 10.0})
    assert c.beta == pytest.approx({4: 10.0, 8: 6.0, 16: 2.0})
    assert c.posterior_mean()[16] == pytest.approx(10 / 12)


def test_forgetting_to_prior_decays_toward_each_candidates_own_prior():
    c = SAGC(candidates=(4, 8), prior_p=(0.0, 1.0), prior_n=4.0, forget="to_prior", gamma=0.5)
    c.propose()
    c.observe([[1, 1, 1, 1]] * 2)  # G = 4, no straggler (max/median = 1)
    # every candidate: a <- 0.5 a + 0.5 a0 (its own a0), then the observed G gets S_t = 0
    assert c.alpha == {4: 1.0, 8: 5.0}
    assert c.beta == {4: 6.0, 8: 1.0}


def test_prior_p_is_checked():
    with pytest.raises(ValueError, match="one probability in \\[0, 1\\] per candidate"):
        SAGC(candidates=(4, 8), prior_p=(0.2,))
    with pytest.raises(ValueError, match="one probability"):
        SAGC(candidates=(4, 8), prior_p=(0.2, 1.5))
    with pytest.raises(ValueError, match="prior_n must be > 0"):
        SAGC(candidates=(4, 8), prior_p=(0.2, 0.3), prior_n=0.0)


def test_prior_p_with_g_min_keeps_the_remaining_candidates_priors():
    c = SAGC(candidates=(4, 8, 16), prior_p=(0.1, 0.5, 0.9), prior_n=10.0, G_min=8)
    assert c.alpha == pytest.approx({8: 6.0, 16: 10.0})


def test_spec_parses_prior_p_and_prior_n():
    c = parse_controller("sagc:candidates=4/8,prior_p=0.25/0.75,prior_n=4")
    assert c.prior_p == (0.25, 0.75)
    assert c.alpha == {4: 2.0, 8: 4.0}
