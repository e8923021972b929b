"""The synchronous pipeline: common random numbers, trace validity, controller feed."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from rolloutlab.sim.control.controllers import SAGC, StaticG
from rolloutlab.sim.pipelines.sync import RunConfig, run_sync
from rolloutlab.sim.trace.schema import validate


class Recorder(StaticG):
    """StaticG that keeps what it observed."""

    def __init__(self, G):
        super().__init__(G)
        self.seen = []

    def observe(self, lengths):
        super().observe(lengths)
        self.seen.append(lengths)


def test_same_seed_same_prompts_and_first_samples(tiny_scenario):
    cfg = RunConfig(steps=3, prompts=4, seed=5)
    r4, _ = run_sync(tiny_scenario, StaticG(4), cfg)
    r8, _ = run_sync(tiny_scenario, StaticG(8), cfg)
    first4 = r8.filter(pl.col("sample_idx") < 4).sort("step", "prompt_id", "sample_idx")
    base = r4.sort("step", "prompt_id", "sample_idx")
    assert first4["response_tokens"].to_list() == base["response_tokens"].to_list()
    assert first4["prompt_id"].to_list() == base["prompt_id"].to_list()


def test_controller_sees_exactly_the_generated_lengths(tiny_scenario):
    ctl = Recorder(3)
    rollouts, steps = run_sync(tiny_scenario, ctl, RunConfig(steps=4, prompts=2))
    for t, seen in enumerate(ctl.seen):
        got = rollouts.filter(pl.col("step") == t).sort("prompt_id", "sample_idx")
        assert np.array(seen).ravel().tolist() == got["response_tokens"].to_list()
    validate(rollouts, "rollouts")
    validate(steps, "steps")


def test_step_timing_adds_up(tiny_scenario):
    _, steps = run_sync(tiny_scenario, StaticG(2), RunConfig(steps=3, prompts=2))
    dur = steps["t_end"] - steps["t_start"]
    assert np.allclose(dur, steps["gen_time"] + steps["train_time"] + steps["sync_time"])
    assert np.allclose(steps["t_start"][1:], steps["t_end"][:-1])
    assert np.allclose(steps["sync_time"], 0.1)


def test_sagc_runs_and_records_state(tiny_scenario):
    rollouts, steps = run_sync(tiny_scenario, SAGC(seed=0, tau=3.0), RunConfig(steps=10, prompts=4))
    assert set(rollouts["group_size"].unique()) <= {4, 8, 16}
    assert '"kind": "sagc"' in steps["controller_state"][0]


def test_bad_run_config():
    with pytest.raises(ValueError):
        RunConfig(steps=0)
