"""The synchronous loop end to end with tiny budgets: traces, controller feed, bad input, resume."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from rolloutlab.real.rundir import checkpoint
from rolloutlab.real.rundir.config import ConfigError
from rolloutlab.real.rundir.folder import RunDirError
from rolloutlab.real.runners.sync import SyncRun, run_sync
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.trace.metrics import run_summary, step_metrics
from rolloutlab.sim.trace.schema import read

from tests.real_helpers import tiny_config


def snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "spec", ["static:2", "sagc:candidates=2/4,init_G=2", "lagc:candidates=2/4,init_G=2"]
)
def test_a_tiny_run_writes_valid_traces_that_the_sim_metrics_read(tmp_path, spec):
    cfg = tiny_config(controller=spec)
    run_sync(cfg, tmp_path, progress=False)
    rollouts = read(tmp_path / "rollouts.parquet", "rollouts")
    steps = read(tmp_path / "steps.parquet", "steps")
    assert steps["step"].to_list() == [0, 1, 2]
    per_step = step_metrics(rollouts)
    assert per_step["n_rollouts"].to_list() == [
        cfg.prompts * g for g in per_step["group_size"].to_list()
    ]
    assert (rollouts["policy_version"] == rollouts["step"]).all()
    summary = run_summary(rollouts, steps)
    assert 0.0 <= summary["slot_idle_frac"] < 1.0 and 0.0 <= summary["straggler_rate"] <= 1.0
    state = json.loads(steps["controller_state"][-1])
    assert state["steps_observed"] == 3
    doc = json.loads((tmp_path / "config.json").read_text())
    assert doc["versions"]["torch"] == torch.__version__ and doc["config"]["controller"] == spec
    assert [json.loads(x)["step"] for x in (tmp_path / "eval.jsonl").read_text().splitlines()] == [
        -1,
        1,
        2,
    ]
    assert checkpoint.latest(tmp_path).name == "step_000003"
    learner = [json.loads(x) for x in (tmp_path / "learner.jsonl").read_text().splitlines()]
    assert [r["step"] for r in learner] == [0, 1, 2]  # the speed probe, every step
    assert all(r["timing_s/probe"] > 0 and r["timing_s/probe_wall"] > 0 for r in learner)
    assert all(r["timing_s/probe_model"] > 0 for r in learner)


class SpyController(StaticG):
    def __init__(self, G):
        super().__init__(G)
        self.seen = []

    def observe(self, lengths):
        self.seen.append([list(g) for g in lengths])
        super().observe(lengths)


def test_the_controller_receives_exactly_the_lengths_the_engine_produced(tmp_path):
    cfg = tiny_config(controller="static:3", eval_every=100)
    run = SyncRun(cfg, tmp_path, "spy-run", resume=False)
    run.controller = SpyController(3)
    produced = []
    generate = run.engine.generate

    def recording_generate(reqs, params):
        res = generate(reqs, params)
        produced.append([len(r.response_ids) for r in res])
        return res

    run.engine.generate = recording_generate
    run.step(0)
    run.step(1)
    flat = [[n for g in step for n in g] for step in run.controller.seen]
    assert flat == produced
    assert all(len(g) == 3 for step in run.controller.seen for g in step)


class ExtrasSpy(StaticG):
    """Declares every extra :func:`sim.control.observation.observe_step` knows."""

    observes = ("rewards", "prompt_ids", "gen_time_s", "step_time_s")

    def __init__(self, G):
        super().__init__(G)
        self.seen = []

    def observe(self, lengths, rewards=None, prompt_ids=None, gen_time_s=None, step_time_s=None):
        self.seen.append((rewards, prompt_ids, gen_time_s, step_time_s))
        super().observe(lengths)


def test_the_controller_receives_the_rewards_prompt_ids_and_times_of_the_trace(tmp_path):
    cfg = tiny_config(controller="static:3", eval_every=100, steps=2)
    run = SyncRun(cfg, tmp_path, "spy-run", resume=False)
    run.controller = ExtrasSpy(3)
    run.run(progress=False)
    rollouts = read(tmp_path / "rollouts.parquet", "rollouts")
    steps = read(tmp_path / "steps.parquet", "steps")
    for t, (rewards, ids, gen_s, step_s) in enumerate(run.controller.seen):
        assert rewards.shape == (cfg.prompts, 3)
        assert rewards.mean() == pytest.approx(steps["reward_mean"][t])
        in_trace = rollouts.filter(rollouts["step"] == t)["prompt_id"].unique().sort().to_list()
        assert ids.tolist() == in_trace
        assert gen_s == pytest.approx(steps["gen_time"][t])
        assert gen_s <= step_s <= steps["t_end"][t] - steps["t_start"][t]


@pytest.mark.parametrize("spec", ["sagc:candidates=2/4,init_G=2", "lagc:candidates=2/4,init_G=2"])
def test_a_resumed_controller_keeps_counting_steps(tmp_path, spec):
    run_sync(tiny_config(controller=spec, steps=2), tmp_path, progress=False)
    cfg = tiny_config(controller=spec, steps=4)
    run_sync(cfg, tmp_path, resume=True, progress=False, overrides={"steps": 4})
    states = read(tmp_path / "steps.parquet", "steps")["controller_state"].to_list()
    assert [json.loads(s)["steps_observed"] for s in states] == [1, 2, 3, 4]


def test_unknown_controller_spec_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ConfigError, match="bogus"):
        run_sync(tiny_config(controller="bogus:1"), tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_a_group_larger_than_the_engine_capacity_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="capacity"):
        run_sync(tiny_config(controller="static:16", capacity=8), tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()  # refused before the directory is made


@pytest.mark.parametrize(
    "args,message",
    [
        (["--steps", "-3"], "'--steps': -3 is not in the range 1<=x<=1000000"),
        (["--max-num-seqs", "0"], "'--max-num-seqs': 0 is not in the range x>=1"),
        (["--lr", "-1"], "'--lr': -1.0 is not in the range x>0"),
        (["--tau", "0.5"], "'--tau': 0.5 is not in the range x>1"),
        (["--controller", "sagc:tau=0.5"], "sagc:tau=0.5"),
        (["--controller", "static:128"], "capacity"),
    ],
)
def test_bad_cli_settings_are_refused_cleanly_and_write_nothing(tmp_path, args, message):
    from click.testing import CliRunner

    from rolloutlab.cli import main

    res = CliRunner().invoke(main, ["real", "sync", "--out", str(tmp_path / "r"), *args])
    assert res.exit_code == 2 and message in res.output
    assert isinstance(res.exception, SystemExit)  # a click error, not a traceback
    assert not (tmp_path / "r").exists()


def test_an_out_dir_holding_another_run_is_refused_and_left_unchanged(tmp_path):
    run_sync(tiny_config(steps=1), tmp_path, progress=False)
    before = snapshot(tmp_path)
    with pytest.raises(RunDirError, match="already holds a run"):
        run_sync(tiny_config(steps=1), tmp_path, progress=False)
    # a trace of another run under this run's config: --resume refuses to mix them
    other = tmp_path / "rollouts.jsonl"
    other.write_text(
        other.read_text().replace(
            json.loads(other.read_text().splitlines()[0])["run_id"], "someone-else"
        )
    )
    before = snapshot(tmp_path)
    with pytest.raises(RunDirError, match="someone-else"):
        run_sync(tiny_config(steps=2), tmp_path, resume=True, progress=False)
    assert snapshot(tmp_path) == before


def test_a_corrupt_checkpoint_is_named_and_nothing_is_destroyed(tmp_path):
    run_sync(tiny_config(steps=2), tmp_path, progress=False)
    weights = checkpoint.latest(tmp_path) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + b"garbage!")
    before = snapshot(tmp_path)
    with pytest.raises(checkpoint.CheckpointError, match="model.safetensors"):
        run_sync(tiny_config(steps=4), tmp_path, resume=True, progress=False)
    assert snapshot(tmp_path) == before


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_kill_9_then_resume_records_every_step_exactly_once(tmp_path):
    steps, prompts, G = 40, 2, 2
    cmd = [
        sys.executable,
        "-c",
        "from rolloutlab.cli import main; main()",
        "real",
        "sync",
        "--controller",
        f"static:{G}",
        "--steps",
        str(steps),
        "--prompts",
        str(prompts),
        "--out",
        str(tmp_path),
        "--warm-start-steps",
        "2",
        "--checkpoint-every",
        "3",
        "--eval-every",
        "100",
        "--max-num-seqs",
        "8",
        "--quiet",
        "--eval-size",
        "4",
        "--max-response-length",
        "24",
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while (
        _lines(tmp_path / "steps.jsonl") < 5 and proc.poll() is None and time.monotonic() < deadline
    ):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = _lines(tmp_path / "steps.jsonl")
    assert 0 < killed_at < steps, "the run must be killed mid-way for this test to mean anything"
    done = subprocess.run(cmd + ["--resume"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    trace = read(tmp_path / "steps.parquet", "steps")
    assert trace["step"].to_list() == list(range(steps))
    rollouts = read(tmp_path / "rollouts.parquet", "rollouts")
    assert rollouts.group_by("step").len().sort("step")["len"].to_list() == [prompts * G] * steps
    assert (
        trace["t_start"].diff().drop_nulls() > 0
    ).all()  # the clock continues across the restart


def test_the_vllm_dtype_reaches_the_engine_config_and_a_bad_one_is_refused(monkeypatch):
    from rolloutlab.real.engines import factory
    from rolloutlab.real.rundir.config import SyncConfig

    seen = {}
    monkeypatch.setattr(
        factory, "engine_factory", lambda engine, mode, vcfg: seen.setdefault("vcfg", vcfg)
    )
    factory.factory_for(SyncConfig(engine="vllm", vllm_dtype="bfloat16"))
    assert seen["vcfg"].dtype == "bfloat16"
    with pytest.raises(ConfigError, match="vllm_dtype"):
        SyncConfig(engine="vllm", vllm_dtype="float16")


def test_the_temperature_option_sets_the_sampler_and_the_learner_alike():
    from rolloutlab.real.rundir.config import OPTION_FIELDS, config_from_options

    from rolloutlab.commands.real.group import sync

    opts = {p.name: p.default for p in sync.params if p.name in OPTION_FIELDS and not p.hidden}
    cfg = config_from_options({**opts, "temperature": 0.6})
    assert (cfg.temperature, cfg.learner.temperature) == (0.6, 0.6)
