"""calibrate run-cost: the cost model of a traced run recovered from its own steps."""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner
from rolloutlab.analysis.idle.run_cost import run_cost
from rolloutlab.analysis.inputs.run_input import RunInputError, load_run
from rolloutlab.sim.scenario.scenario import load_scenario
from rolloutlab.sim.trace import schema as trace

from rolloutlab.cli import main
from tests.compare_helpers import COST, write_run


def _with_learner(run_dir, const, per_token, sync):
    """Rewrite the steps table: train_time = const + per_token * (prompt + response tokens)."""
    roll = pl.read_parquet(run_dir / "rollouts.parquet")
    tok = roll.group_by("step").agg((pl.col("prompt_tokens") + pl.col("response_tokens")).sum())
    steps = pl.read_parquet(run_dir / "steps.parquet").drop("train_time", "sync_time")
    steps = steps.join(tok.rename({"prompt_tokens": "tok"}), on="step").with_columns(
        (const + per_token * pl.col("tok")).alias("train_time"), pl.lit(sync).alias("sync_time")
    )
    trace.write_parquet(steps.select(trace.STEP_SCHEMA.keys()), run_dir / "steps.parquet", "steps")


def test_the_decode_learner_and_sync_costs_that_timed_a_synthetic_run_come_back(tmp_path):
    run_dir = write_run(tmp_path / "run", [8, 8, 4, 16, 8, 12])
    _with_learner(run_dir, const=0.7, per_token=2e-4, sync=0.3)
    cost, engine, fit = run_cost(load_run(run_dir))
    assert cost["a_s"] == pytest.approx(COST.a_s, rel=1e-3)
    assert cost["learner_const_s"] == pytest.approx(0.7, rel=1e-6)
    assert cost["learner_s_per_token"] == pytest.approx(2e-4, rel=1e-6)
    assert fit["learner_rule"] == "intercept+slope"
    assert cost["sync_s"] == pytest.approx(0.3)
    assert cost["gen_overhead_s"] == pytest.approx(0.0, abs=1e-6)  # gen_time is the makespan
    assert engine["max_num_seqs"] == 16 and not engine["prefix_caching"]
    assert fit["steps"] == 6


def test_a_constant_learner_time_is_priced_per_token_through_the_origin(tmp_path):
    run_dir = write_run(tmp_path / "run", [8, 8, 8, 8, 8])
    _with_learner(run_dir, const=4.0, per_token=0.0, sync=0.3)
    roll = pl.read_parquet(run_dir / "rollouts.parquet")
    tokens = int((roll["prompt_tokens"] + roll["response_tokens"]).sum())  # over the 5 steps
    cost, _, fit = run_cost(load_run(run_dir))
    assert fit["learner_rule"] == "origin"
    assert cost["learner_const_s"] == 0.0
    assert cost["learner_s_per_token"] == pytest.approx(5 * 4.0 / tokens)
    assert cost["sync_s"] == pytest.approx(0.3)
    assert "not identified" in fit["learner_why"]


def test_one_step_is_refused_naming_the_run(tmp_path):
    run_dir = write_run(tmp_path / "run", [8])
    with pytest.raises(RunInputError, match="needs >= 2"):
        run_cost(load_run(run_dir))


def test_the_cli_writes_a_calibration_the_simulator_loads(tmp_path):
    run_dir = write_run(tmp_path / "run", [8, 8, 4, 16])
    out = tmp_path / "cost.json"
    res = CliRunner().invoke(main, ["calibrate", "run-cost", str(run_dir), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[-1].startswith("learner ")
    d = json.loads(out.read_text())
    assert d["cost"]["a_s"] == pytest.approx(COST.a_s, rel=1e-3)
    assert d["provenance"]["source"] == "run-cost"
    assert load_scenario(out).cost.a_s == pytest.approx(COST.a_s, rel=1e-3)


def test_a_vllm_run_is_priced_with_prefix_caching(tmp_path):
    run_dir = write_run(tmp_path / "run", [8, 8, 4])
    doc = json.loads((run_dir / "config.json").read_text())
    doc["config"]["engine"] = "vllm"
    (run_dir / "config.json").write_text(json.dumps(doc))
    _, engine, _ = run_cost(load_run(run_dir))
    assert engine["prefix_caching"]
