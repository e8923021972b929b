"""The per-group straggler reading: group straggler share, SAGC's group reading, and
choosing tau from a length model (sim.trace.metrics, sim.control.tau)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.control.controllers import SAGC
from rolloutlab.sim.control.spec import parse_controller
from rolloutlab.sim.control.tau import choose_tau, rate_table, straggler_ratios, tau_for_rate
from rolloutlab.sim.models.lengths import LognormalLengths
from rolloutlab.sim.trace.metrics import (
    group_straggler_ratio,
    group_straggler_share,
    straggler_reading,
)

GROUPS = [[1, 1, 10], [1, 2, 3], [2, 2, 2]]  # ratios 10, 1.5, 1


def test_group_share_by_hand():
    assert group_straggler_share(GROUPS, tau=3.0) == pytest.approx(1 / 3)
    assert group_straggler_share(GROUPS, tau=1.2) == pytest.approx(2 / 3)


def test_readings_by_hand():
    # step: max 10 / median 2 = 5 > 4; group: one group of three > 4, not above 0.5
    assert straggler_reading(GROUPS, 4.0, "step") == (5.0, 1)
    assert straggler_reading(GROUPS, 4.0, "group", level=0.5) == (pytest.approx(1 / 3), 0)
    assert straggler_reading(GROUPS, 4.0, "group", level=0.2)[1] == 1
    with pytest.raises(ValueError, match="reading"):
        straggler_reading(GROUPS, 4.0, "prompt")


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 12), st.integers(1, 6), st.integers(0, 2**31 - 1))
def test_vectorised_group_ratio_equals_the_loop(n, G, seed):
    L = np.random.default_rng(seed).integers(1, 500, size=(n, G))
    loop = np.array([g.max() / np.median(g) for g in L.astype(float)])
    np.testing.assert_allclose(group_straggler_ratio(L), loop)
    np.testing.assert_allclose(group_straggler_ratio(L.tolist()), loop)


def test_group_ratio_refuses_a_zero_median():
    with pytest.raises(ValueError, match="zero"):
        group_straggler_ratio(np.array([[0, 0, 5]]))


def test_sagc_group_reading_ignores_one_long_group():
    # one straggling group of 64 saturates the step ratio, not the group share
    lengths = [[100, 100, 100, 100]] * 63 + [[100, 100, 100, 5000]]
    step, group = SAGC(tau=4.0), SAGC(tau=4.0, reading="group", level=0.1)
    step.propose(), group.propose()
    step.observe(lengths), group.observe(lengths)
    assert step.history[-1][1] == 1 and group.history[-1][1] == 0
    obs = group.explain()["observed"]
    assert obs["group_share"] == pytest.approx(1 / 64) and obs["level"] == 0.1


def test_sagc_reading_is_a_spec_option_and_checked():
    ctl = parse_controller("sagc:reading=group,level=0.2,tau=3")
    assert (ctl.reading, ctl.level, ctl.tau) == ("group", 0.2, 3.0)
    with pytest.raises(ValueError, match="reading"):
        SAGC(reading="prompt")
    with pytest.raises(ValueError, match="level"):
        SAGC(reading="group", level=1.0)


def test_tau_for_rate_is_the_upper_quantile():
    # ratios 1..10: the 0.7 quantile (linear) is at position 6.3 -> 7.3
    assert tau_for_rate(np.arange(1, 11), 0.3) == pytest.approx(7.3)
    with pytest.raises(ValueError, match="delta"):
        tau_for_rate(np.arange(3), 1.0)


WIDE = LognormalLengths(
    mu=np.log(2000), sigma_prompt=0.3, sigma_within=0.8, max_response_length=32768
)


def test_step_reading_saturates_where_the_group_share_does_not():
    # 512 prompts: the step-level rate is 1 at every G, the group share grows with G
    rows = {(r["G"], r["tau"]): r for r in rate_table(WIDE, [4, 8, 16], 512, [4.0], steps=4)}
    assert all(rows[(G, 4.0)]["step_rate"] == 1.0 for G in (4, 8, 16))
    shares = [rows[(G, 4.0)]["group_share"] for G in (4, 8, 16)]
    assert 0 < shares[0] < shares[1] < shares[2] < 1


def test_chosen_tau_gives_the_target_rate_at_the_current_G():
    tau = choose_tau(WIDE, 8, 256, 0.3, "group", steps=4)
    r = straggler_ratios(WIDE, 8, 256, steps=4)
    assert np.mean(r > tau) == pytest.approx(0.3, abs=1 / len(r) + 1e-9)
    with pytest.raises(ValueError, match="G >= 2"):
        straggler_ratios(WIDE, 1, 8, reading="group")
