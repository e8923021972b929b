"""Tail batching: ``oversample:R:group=N/K`` over-provisions prompts and
responses in one step and cuts the slowest of both; the step table says what was cut."""

from __future__ import annotations

import math

import numpy as np
import pytest
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.models.dynamics import step_lengths
from rolloutlab.sim.pipelines.registry import simulate
from rolloutlab.sim.pipelines.spec import parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.trace.metrics import consumed

from tests.test_groupover import wide


@pytest.mark.parametrize("R, N, K", [(1.5, 6, 4), (1.25, 3, 2), (2.0, 4, 4)])
def test_first_b_groups_to_reach_k_are_kept_and_the_cut_is_reported(R, N, K):
    """All requests run at once at a constant iteration time: a group is ready when its
    K-th shortest sample ends, the learner keeps the first B ready groups (their K
    shortest), everything else of the step is cut. Expected from the drawn lengths alone."""
    B, steps, seed = 6, 5, 3
    pipe = parse_pipeline(f"oversample:{R}:group={N}/{K}")
    res = simulate(wide(), StaticG(K), RunConfig(steps, B, seed), pipe, "simpy")
    n, W = math.ceil(R * B), -(-K * N // K)
    for j in range(steps):
        drawn = step_lengths(wide().lengths, seed, j, j * n + np.arange(n), W)  # (n, W)
        kth = np.sort(drawn, axis=1)[:, K - 1]
        order = np.argsort(kth, kind="stable")
        row = res.steps.row(j, named=True)
        assert row["cut_rollouts"] == n * W - B * K
        if kth[order[B - 1]] == kth[order[B]] if n > B else False:
            continue  # a tie decides which group is kept: not determined by the lengths
        kept = np.sort(drawn[order[:B]], axis=1)[:, :K]
        assert row["cut_len_bias"] == pytest.approx(kept.mean() / drawn.mean(), rel=1e-12)
        used = consumed(res.rollouts.filter(res.rollouts["step"] == j))
        assert sorted(used["response_tokens"].to_list()) == sorted(kept.ravel().tolist())


def test_spec_round_trips_and_refuses_bad_factors():
    p = parse_pipeline("oversample:1.5:group=6/4")
    assert p.spec == "oversample:1.5:group=6/4" and p.trims and p.launched(4) == 6
    assert parse_pipeline(p.spec) == p
    for bad, words in [
        ("oversample:0.8", "ratio must be finite and >= 1"),
        ("oversample:1.5:group=2/4", "need 1 <= K <= N"),
        ("sync:group=2/1", "group=N/K is for oversample:R only"),
        ("oversample:1.5:group=x", "expected group=N/K"),
    ]:
        with pytest.raises(ValueError, match=words.replace("(", r"\(")):
            parse_pipeline(bad)
