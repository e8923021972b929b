"""Length bias of over-sampling counts the aborted rollouts at their would-be lengths."""

from __future__ import annotations

import numpy as np
import polars as pl
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.models.dynamics import step_lengths
from rolloutlab.sim.pipelines.async_pipeline import run_pipeline
from rolloutlab.sim.pipelines.spec import parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.overrides import apply_overrides
from rolloutlab.sim.scenario.scenario import load_scenario
from rolloutlab.sim.trace.metrics import drop_bias


def first_to_finish_ratio(groups: np.ndarray, keep: int) -> float:
    """Mean length of the ``keep`` groups with the shortest longest sample over the mean
    of all: ``groups`` ``(batches, n_prompts, G)``. With every request running at once at
    an iteration cost almost independent of the batch, a group finishes with its
    longest sample, so these are the groups an over-sampling learner keeps."""
    kept = [b[np.argsort(b.max(axis=1), kind="stable")[:keep]] for b in groups]
    return float(np.concatenate(kept).mean() / groups.mean())


def test_oversampling_bias_counts_aborted_at_their_would_be_lengths():
    """Issue fault: ``--steps 10 --workers 4 --pipeline oversample:1.125`` on the default
    scenario (B = 16, G = 8; 18 prompts a step, the 2 slowest groups aborted) reported
    len_consumed_over_generated = 1.000 although the aborted groups are the long ones.
    Right value, computed without the simulator: (a) keep-the-first-16 on the very
    lengths the run draws (same keyed draws): equal to 3 decimals; (b) a Monte Carlo of
    the length law (4000 fresh batches): about 0.88, as the issue says."""
    sc = apply_overrides(load_scenario("longcot"), workers=4)
    cfg = RunConfig(steps=10, prompts=16, seed=0)
    rollouts, _, ledger = run_pipeline(sc, StaticG(8), cfg, parse_pipeline("oversample:1.125"))
    ratio = drop_bias(rollouts)["len_consumed_over_generated"]
    assert ledger.aborted > 0
    drawn = np.stack([step_lengths(sc.lengths, 0, j, j * 18 + np.arange(18), 8) for j in range(10)])
    assert abs(ratio - first_to_finish_ratio(drawn, 16)) < 1e-3
    rng = np.random.default_rng(1)
    fresh = np.stack([sc.lengths.sample(rng, 18, 8, 0) for _ in range(4000)])
    assert abs(first_to_finish_ratio(fresh, 16) - 0.88) < 0.01
    assert abs(ratio - first_to_finish_ratio(fresh, 16)) < 3 * 0.0125  # 10-step noise: sd 0.0125


def test_rows_without_would_be_lengths_count_as_before():
    """A real trace (no would-be length) leaves its truncated aborted rows out."""
    rows = pl.DataFrame(
        {
            "finish_reason": ["stop", "stop", "abort"],
            "response_tokens": [10, 30, 5],
            "learner_version": [0, 0, 0],
            "policy_version": [0, 0, 0],
        }
    )
    assert drop_bias(rows)["len_consumed_over_generated"] == 1.0
    with_known = rows.with_columns(pl.Series("would_be_response_tokens", [10, 30, 80]))
    assert drop_bias(with_known)["len_consumed_over_generated"] == 20 / 40
