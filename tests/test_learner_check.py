"""calibration/validation/learner_check.py: the naive rules beside the learner roofline."""

from __future__ import annotations

import polars as pl
import pytest
from rolloutlab.calibration.validation.learner_check import naive_errors


def test_constant_and_per_token_rules_by_hand():
    rows = pl.DataFrame(
        {
            "run": ["fit", "fit", "other", "other"],
            "phase": ["ref", "update", "ref", "update"],
            "measured_s": [10.0, 40.0, 25.0, 50.0],
            "tokens": [1000.0, 1000.0, 2000.0, 2000.0],
        }
    )
    out = naive_errors(rows, "fit").filter(pl.col("run") == "other")
    # constant: 10 / 25 - 1 and 40 / 50 - 1; per token: twice the tokens, 20 / 25 and 80 / 50
    assert out["constant_error"].to_list() == pytest.approx([-0.6, -0.2])
    assert out["per_token_error"].to_list() == pytest.approx([-0.2, 0.6])
    fit = naive_errors(rows, "fit").filter(pl.col("run") == "fit")
    assert fit["constant_error"].to_list() == [0.0, 0.0]
    with pytest.raises(ValueError, match="fit run"):
        naive_errors(rows, "missing")
