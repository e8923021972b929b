"""A pipeline whose learner can never fill a batch stops with a clear error (found from
the simulation's state, not from the text of SimPy's messages)."""

from __future__ import annotations

from unittest import mock

import pytest
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.pipelines.async_pipeline import run_pipeline
from rolloutlab.sim.pipelines.spec import PipelineConfig, parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig


def test_a_learner_that_drops_every_group_is_reported(tiny_scenario):
    # every group counts as too stale: the dispatcher stops at its lead, nothing is left
    # to happen while the learner still waits for its first batch
    with mock.patch.object(PipelineConfig, "max_staleness", property(lambda self: -1)):
        with pytest.raises(RuntimeError, match="cannot fill a batch of 2 groups"):
            run_pipeline(tiny_scenario, StaticG(2), RunConfig(3, 2, 0), parse_pipeline("bounded:1"))


def test_an_error_inside_the_simulation_is_not_relabelled(tiny_scenario):
    boom = RuntimeError("engine failure")
    with mock.patch("rolloutlab.sim.engine.interrupts.pause", side_effect=boom):
        with pytest.raises(RuntimeError, match="engine failure"):
            run_pipeline(
                tiny_scenario, StaticG(2), RunConfig(3, 2, 0), parse_pipeline("one-step-off")
            )
