"""Spread statistics of real/tasks/spread.py on hand-made lengths (no torch)."""

import numpy as np
import pytest
from rolloutlab.real.tasks.spread import icc_log, spread_stats


def test_icc_is_one_when_groups_are_constant_and_near_zero_for_iid_lengths():
    assert icc_log(np.array([[2, 2, 2], [8, 8, 8], [4, 4, 4]])) == pytest.approx(1.0)
    iid = np.random.default_rng(0).integers(1, 50, size=(400, 16))
    assert abs(icc_log(iid)) < 0.05
    with pytest.raises(ValueError, match="2 groups"):
        icc_log(np.ones((1, 4)))


def test_ratios_and_pass_rates_by_hand():
    # one step, two prompts, G_max = 4
    lengths = np.array([[[2, 2, 4, 20], [3, 3, 3, 3]]])
    correct = np.array([[[1, 0, 0, 0], [1, 1, 1, 1]]], dtype=bool)
    s = spread_stats(lengths, correct, (2, 4))
    # G=2: groups (2,2) and (3,3) -> ratios 1, 1; step (2,2,3,3): max 3 / median 2.5
    assert s["G=2"]["group_ratio_median"] == 1.0
    assert s["G=2"]["step_ratio_median"] == pytest.approx(3 / 2.5)
    # G=4: group ratios 20/3 and 1; step: max 20 / median 3
    assert s["G=4"]["group_ratio_p90"] == pytest.approx(1 + 0.9 * (20 / 3 - 1))
    assert s["G=4"]["step_ratio_median"] == pytest.approx(20 / 3)
    assert s["G=4"]["step_ratio_frac_gt4"] == 1.0
    p = s["pass_rate"]
    assert (p["mean"], p["share_hard"], p["share_solved"], p["share_unsolved"]) == (
        0.625,
        0.5,
        0.5,
        0,
    )
