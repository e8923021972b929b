"""rolloutlab.testing: the kit passes the built-in controllers and
the worked example, and fails -- naming the property, with the smallest failing example
-- the two deliberately broken controllers of tests/data/controllers/."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.testing import ContractViolation, StepLaw, check_controller, materialize
from rolloutlab.testing.strategies import extreme_streams, streams

from rolloutlab.cli import main

ZERO = "tests/data/controllers/zero_after_straggler.py:ZeroAfterStraggler"
FORGETS = "tests/data/controllers/forgets_rng.py:ForgetsRng"
EXAMPLE = "examples/controllers/pass_rate_g.py:PassRateG"


@pytest.mark.parametrize("spec", ["static:8", "sagc:step_time_budget_s=30", EXAMPLE])
def test_the_kit_passes_builtins_and_the_worked_example(spec):
    report = check_controller(spec, max_examples=10, straggler_steps=1000)
    assert report.ok and {r.key for r in report.results} == {
        "candidates",
        "extremes",
        "restore",
        "seed",
        "straggler",
        "timing",
    }
    straggler = next(r for r in report.results if r.key == "straggler")
    assert straggler.status == ("pass" if spec.startswith("sagc") else "skip")


def test_the_kit_takes_a_class_or_a_factory():
    assert check_controller(lambda: StaticG(4), max_examples=5).ok
    from rolloutlab.sim.control.controllers import SAGC

    report = check_controller(SAGC, max_examples=5, only=["restore", "straggler"])
    assert [r.status for r in report.results] == ["pass", "pass"]


def test_a_controller_that_returns_zero_after_a_long_straggler_fails_with_the_smallest_example():
    report = check_controller(
        ZERO, max_examples=10, max_steps=4, raise_on_failure=False, only=["candidates"]
    )
    (result,) = report.results
    assert result.status == "fail" and "propose() returned 0" in result.detail
    steps = result.example.splitlines()
    # shrunk to the shortest failing stream: a cap straggler, then any step
    assert len(steps) == 2 and "cap_straggler" in steps[0], steps
    assert all("median 1 tokens" in s and "1 prompt(s)" in s for s in steps), steps


def test_a_controller_whose_restored_state_diverges_fails_the_restore_property():
    with pytest.raises(ContractViolation) as err:
        check_controller(FORGETS, max_examples=8, max_steps=3)
    text = str(err.value)
    assert "FAIL  [restore]" in text and "decisions diverge at step 1" in text
    assert "restore after 1 of these steps:\n" in text and "step 1: " in text
    for key in ("candidates", "extremes", "seed"):  # the other properties hold
        assert f"PASS  [{key}]" in text


def test_check_controller_cli_exit_codes(tmp_path):
    ok = CliRunner().invoke(main, ["check-controller", "static:4", "--examples", "5"])
    assert ok.exit_code == 0 and "5 passed, 0 failed, 1 skipped" in ok.output
    bad = CliRunner().invoke(
        main,
        ["check-controller", FORGETS, "--only", "restore", "--max-steps", "3", "--examples", "8"],
    )
    assert bad.exit_code == 1 and "smallest failing example" in bad.output
    assert "restore failed" in bad.output
    wrong = CliRunner().invoke(main, ["check-controller", "static:4", "--only", "speed"])
    assert wrong.exit_code == 2 and "--only" in wrong.output


def test_a_factory_that_cannot_build_is_raised_not_reported():
    with pytest.raises(ValueError, match="controller spec 'sagc:tau=nan'"):
        check_controller("sagc:tau=nan")
    with pytest.raises(ValueError, match="unknown properties"):
        check_controller("static:4", only=["speed"])


def test_a_budget_turns_decision_time_into_a_reported_failure():
    """Reported against the budget, not asserted on a measured time: a budget of 0
    cannot be met by any measured step (every step takes > 0 s)."""
    report = check_controller(
        "static:4",
        max_examples=3,
        budget_ms=1e-12,
        only=["candidates", "timing"],
        raise_on_failure=False,
    )
    timing = report.results[-1]
    assert timing.status == "fail" and "budget 1e-12 ms" in timing.detail
    assert set(report.timing_ms) == {"mean", "p99", "max"}


@settings(max_examples=20, deadline=None)
@given(laws=streams(8), G=st.sampled_from([1, 4, 16]))
def test_materialized_observations_are_well_formed(laws, G):
    clock = 0.0
    for t, law in enumerate(laws):
        obs = materialize(law, G, t, clock)
        lengths = np.asarray(obs["lengths"])
        g = G if law.group is None else law.group
        assert lengths.shape == (law.prompts, g)
        assert lengths.min() >= 1 and lengths.max() <= law.cap
        assert obs["finish_reasons"].shape == lengths.shape
        assert ((obs["finish_reasons"] == "length") == (lengths >= law.cap)).all()
        if obs["rewards"] is not None:
            assert obs["rewards"].shape == lengths.shape
        assert obs["wall_clock_s"] > clock and obs["step_time_s"] > obs["gen_time_s"] > 0
        clock = obs["wall_clock_s"]
        assert json.dumps(obs["lengths"])  # plain ints


def test_materialize_is_deterministic_and_the_straggler_law_is_what_it_says():
    law = StepLaw("cap_straggler", median=10, prompts=3, cap=500, seed=3)
    a, b = materialize(law, 4, 7), materialize(law, 4, 7)
    assert a["lengths"] == b["lengths"]
    flat = sorted(x for g in a["lengths"] for x in g)
    assert flat == [10] * 11 + [500]


@settings(max_examples=20, deadline=None)
@given(laws=extreme_streams(6))
def test_extreme_streams_hold_only_edge_cases(laws):
    for law in laws:
        assert law.shape in ("equal", "cap_straggler", "pareto")
        assert law.rewards in ("zeros", "ones", "none") and law.median in (1, 2, law.cap)
