"""A run's settings are checked once, into a frozen plan that the run takes:
:func:`sim.studies.compare.plan_comparison` and :func:`sim.pipelines.registry.plan_run`
check; :func:`run_comparison` and :func:`run_plan` only run."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import polars as pl
import pytest
from click.testing import CliRunner
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.models.step_phases import PeriodicPhase, StepPhases
from rolloutlab.sim.pipelines import registry
from rolloutlab.sim.pipelines.spec import PipelineConfig, parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.scenario import load_scenario
from rolloutlab.sim.studies import compare
from rolloutlab.sim.studies.compare import plan_comparison, run_comparison

from rolloutlab.cli import main

PIPES = [parse_pipeline("sync"), parse_pipeline("one-step-off")]


def test_a_plan_is_frozen():
    plan = plan_comparison(load_scenario("gsm8k"), ["static:4"], RunConfig(steps=2, prompts=4))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.cfg = RunConfig()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.runs[0].engine = "fast"  # type: ignore[misc]


def test_running_a_plan_checks_nothing_again(monkeypatch):
    sc, cfg = load_scenario("gsm8k"), RunConfig(steps=2, prompts=4)
    plan = plan_comparison(sc, ["static:4", "sagc"], cfg, PIPES, target=0.5)

    def refuse(*args, **kwargs):
        raise AssertionError("checked again")

    for module, name in [
        (compare, "check_comparison"),
        (compare, "check_target"),
        (compare, "plan_run"),
        (registry, "check_step_phases"),
        (registry, "check_multi_turn"),
        (registry, "runner_for"),
    ]:
        monkeypatch.setattr(module, name, refuse)
    monkeypatch.setattr(PipelineConfig, "check_batch", refuse)
    result = run_comparison(plan)
    assert result.summary.height == 4
    assert registry.run_plan(plan.runs[1], StaticG(4), cfg).steps.height == 2


def test_sim_checks_each_pipeline_once(monkeypatch, tmp_path):
    calls: Counter[str] = Counter()
    for name in ("check_step_phases", "runner_for", "check_multi_turn"):
        real = getattr(registry, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(registry, name, counted)
    args = ["sim", "--scenario", "gsm8k", "--controller", "static:4,sagc", "--pipeline",
            "sync,one-step-off", "--steps", "2", "--prompts", "4", "--no-figure",
            "--out", str(tmp_path / "o")]  # fmt: skip
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    # one check per pipeline, not one per (controller, pipeline) run on top
    assert calls == {"check_step_phases": 2, "runner_for": 2, "check_multi_turn": 2}


def _sim_with_phases(tmp_path, *extra: str):
    """``sim`` on gsm8k with a 50 s validation phase every 3 steps, synchronous and
    one-step-off: ``(result, out)``."""
    d = dict(load_scenario("gsm8k").source)
    d["step_phases"] = StepPhases(None, (PeriodicPhase("testing", 3, 50.0),)).to_dict()
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(d))
    out = tmp_path / "o"
    args = ["sim", "--calibration", str(cal), "--pipeline", "sync,one-step-off", "--steps",
            "3", "--prompts", "4", "--no-figure", *extra, "--out", str(out)]  # fmt: skip
    return CliRunner().invoke(main, args), out


def test_a_setting_no_run_can_take_is_refused_before_the_folder(tmp_path):
    """A calibration's step phases with an asynchronous pipeline: one line, exit 2,
    nothing written."""
    res, out = _sim_with_phases(tmp_path)
    assert res.exit_code == 2, res.output
    assert "priced by the synchronous pipeline only: where one-step-off" in res.output
    assert "--without-step-phases" in res.output  # the way out, by name
    assert not out.exists()


def test_without_step_phases_every_pipeline_runs_and_the_run_says_so(tmp_path):
    res, out = _sim_with_phases(tmp_path, "--without-step-phases")
    assert res.exit_code == 0, res.output
    assert "step phases are left out of every run" in res.output
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["step_phases"] == "left out (--without-step-phases)"
    # the 50 s validation of step 3 would be in the synchronous step; it is in none
    assert "prices the step's reward and periodic phases" not in res.output
    steps = pl.read_parquet(out / "steps.parquet")
    assert "periodic_s" not in steps.columns or steps["periodic_s"].drop_nulls().sum() == 0
