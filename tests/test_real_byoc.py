"""A user's controller in the real loops: the worked example runs in
`real sync` and resumes; a file controller sees the version-2 observation fields."""

from __future__ import annotations

import json
import textwrap

import pytest

torch = pytest.importorskip("torch")

from rolloutlab.real.runners.sync import run_sync
from rolloutlab.sim.trace.schema import read

from tests.real_helpers import tiny_config

EXAMPLE = "examples/controllers/pass_rate_g.py:PassRateG:candidates=2/4,hits=1"

SEES_ALL = """
class SeesAll:
    candidates = (2,)
    observes = ("observation",)

    def __init__(self):
        self.last = {}

    def propose(self):
        return 2

    def observe(self, lengths, observation=None):
        o = observation
        self.last = {
            "version": o.version,
            "finish_reasons": [list(map(str, r)) for r in o.finish_reasons],
            "lengths": [list(map(int, g)) for g in lengths],
            "learner_time_s": o.learner_time_s,
            "gen_time_s": o.gen_time_s,
            "step_time_s": o.step_time_s,
            "wall_clock_s": o.wall_clock_s,
            "rewards": [list(map(float, r)) for r in o.rewards],
        }

    def state_dict(self):
        return dict(self.last)

    def load_state_dict(self, state):
        self.last = dict(state)
"""


def test_the_worked_example_runs_in_real_sync_and_resumes(tmp_path):
    run_sync(tiny_config(controller=EXAMPLE, steps=2, checkpoint_every=2), tmp_path, progress=False)
    first = json.loads(read(tmp_path / "steps.parquet", "steps")["controller_state"][-1])
    cfg = tiny_config(controller=EXAMPLE, steps=2, checkpoint_every=2)
    run_sync(cfg, tmp_path, resume=True, progress=False, overrides={"steps": 3})
    steps = read(tmp_path / "steps.parquet", "steps")
    assert steps["step"].to_list() == [0, 1, 2]
    states = [json.loads(s) for s in steps["controller_state"]]
    assert all(0.0 <= s["p"] <= 1.0 for s in states) and states[1] == first
    rollouts = read(tmp_path / "rollouts.parquet", "rollouts")
    assert set(rollouts["group_size"].unique().to_list()) <= {2, 4}


def test_a_file_controller_gets_finish_reasons_learner_time_and_wall_clock(tmp_path):
    ctl = tmp_path / "sees_all.py"
    ctl.write_text(textwrap.dedent(SEES_ALL))
    out = tmp_path / "run"
    run_sync(tiny_config(controller=f"{ctl}:SeesAll", steps=2), out, progress=False)
    steps = read(out / "steps.parquet", "steps")
    rollouts = read(out / "rollouts.parquet", "rollouts").sort("prompt_id", "sample_idx")
    last = json.loads(steps["controller_state"][-1])
    assert last["version"] == 2
    step1 = rollouts.filter(rollouts["step"] == 1)
    assert sum(last["finish_reasons"], []) == step1["finish_reason"].to_list()
    assert sum(last["lengths"], []) == step1["response_tokens"].to_list()
    assert last["learner_time_s"] > 0 and last["gen_time_s"] > 0
    assert last["step_time_s"] >= last["gen_time_s"] + last["learner_time_s"]
    assert last["wall_clock_s"] <= steps["t_end"][-1] + 1e-9
