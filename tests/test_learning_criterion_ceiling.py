"""bench/learning_criterion_ceiling.py (docs/learning.md §5): how often the true mean passes
item 5's per-setting rules at five seeds."""

import importlib.util
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats

_PATH = Path(__file__).resolve().parents[1] / "bench" / "learning_criterion_ceiling.py"
_SPEC = importlib.util.spec_from_file_location("learning_criterion_ceiling", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def test_within_sd_rate_is_the_t_distribution_whatever_the_spread():
    """|mean - mu| < sd at n seeds is |t_{n-1}| < sqrt(n): P = 0.910 at n = 5, for any
    mean and sd of the seeds."""
    exact = 2 * stats.t.cdf(np.sqrt(5), df=4) - 1
    for steps in (np.array([30.0, 40, 30, 30, 40]), np.array([20.0, 110, 30, 70, 90, 55])):
        _, within_sd = bench.oracle_pass_rates(steps, 5, 40000, np.random.default_rng(1))
        assert within_sd.mean() == pytest.approx(exact, abs=0.006)


def test_within_25_rate_falls_as_the_seeds_spread():
    rng = np.random.default_rng(2)
    tight, _ = bench.oracle_pass_rates(np.array([48.0, 50, 52, 50]), 5, 20000, rng)
    wide, _ = bench.oracle_pass_rates(np.array([20.0, 50, 80, 50]), 5, 20000, rng)
    assert tight.mean() > 0.99 and wide.mean() < tight.mean() - 0.1


def test_steps_to_target_by_hand():
    runs = pl.DataFrame({"run": ["a", "a", "b"], "G": [4, 4, 8], "B": [4, 4, 8],
                         "seed": [0, 0, 1]})  # fmt: skip
    evals = pl.DataFrame({"run": ["a", "a", "a", "b"], "step": [-1, 9, 19, 9],
                          "accuracy": [0.5, 0.3, 0.36, 0.2]})  # fmt: skip
    t = bench.steps_to_target(runs, evals, 0.35).sort("run")
    assert t["steps"].to_list() == [20, None]  # step -1 (before training) never counts
