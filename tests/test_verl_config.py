"""A verl trainer config in: verl's own example configs
(tests/data/verl_config, SOURCE.md) mapped field by field, every other field listed as
ignored, and ``rolloutlab sim --verl-config`` / ``rolloutlab scenario from-verl`` running
on them."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from click.testing import CliRunner
from rolloutlab.calibration.scenarios.verl_config import apply_to_calibration, load, read_flat
from rolloutlab.sim.models.hardware import get_gpu, get_model
from rolloutlab.sim.scenario.overrides import apply_overrides
from rolloutlab.sim.scenario.scenario import load_scenario, scenario_from_dict

from rolloutlab.cli import main

DATA = Path(__file__).parent / "data" / "verl_config"
SPLIT = DATA / "ppo_trainer_split.yaml"
ASYNC = DATA / "fully_async_ppo_trainer.yaml"
OFF = DATA / "one_step_off_ppo_trainer.yaml"
DAPO = """
data.train_batch_size: 32
data.gen_batch_size: 96
data.max_response_length: 2048
actor_rollout_ref.rollout.n: 8
actor_rollout_ref.model.path: Qwen/Qwen2.5-7B-Instruct
actor_rollout_ref.rollout.tensor_model_parallel_size: 2
trainer: {nnodes: 2, n_gpus_per_node: 8, total_training_steps: 3}
algorithm: {adv_estimator: grpo, filter_groups: {enable: true, max_num_gen_batches: 10}}
"""
"""A DAPO run as overrides (dotted keys) and nested blocks, mixed."""


def test_a_whole_verl_example_config_is_mapped_and_every_other_field_listed():
    m = load(SPLIT)
    assert m.mode == "sync"
    assert m.settings == {
        "prompts": 1024,
        "group_size": 1,
        "max_response_length": 512,
        "max_prompt_length": 512,  # ${data.max_prompt_length} resolved
        "tp": 2,
        "workers": 4,  # 1 node x 8 GPUs / TP 2
        "max_num_seqs": 1024,
        "pipeline": "sync",
        "placement": "colocated",
        "max_num_batched_tokens": 8192,
        "chunked_prefill": True,
        "gpu_memory_utilization": 0.5,
        "lr": 1e-6,  # written 1e-6: a float to verl's OmegaConf, a string to PyYAML
        "updates_per_batch": 4,  # ceil(1024 / 256) mini-batches x ppo_epochs 1
    }
    mapped = {r.field for r in m.rows}
    flat = read_flat(SPLIT)
    assert mapped | set(m.ignored) | set(m.missing) == set(flat)  # every field accounted
    assert not (mapped & set(m.ignored))
    assert m.missing == ["trainer.total_training_steps"]  # null in the file
    assert "critic.optim.lr" in m.ignored and "actor_rollout_ref.rollout.temperature" in m.ignored
    model = next(r for r in m.rows if r.field == "actor_rollout_ref.model.path")
    assert "not a roofline model" in model.note and "7B parameters" in model.note
    adv = next(r for r in m.rows if r.field == "algorithm.adv_estimator")
    assert adv.value == "gae" and adv.setting == "(not group-based)"


def test_the_fully_async_and_one_step_off_examples_give_their_pipelines():
    m = load(ASYNC)
    assert m.mode == "fully-async"
    # threshold 0.1, sync every 4 steps, partial rollouts resumed; S above the lag
    assert m.settings["pipeline"] == "async:9:threshold=0.1:sync_every=4:sync=abort"
    assert m.settings["workers"] == 8 and m.settings["group_size"] == 4
    assert m.settings["placement"] == "separate"
    assert "actor_rollout_ref.actor.ppo_mini_batch_size" in m.missing  # B needs it
    off = load(OFF)
    assert off.mode == "one-step-off" and off.settings["pipeline"] == "one-step-off:sync=drain"
    assert "data.train_batch_size" in off.missing


def _sim(tmp_path, *args):
    res = CliRunner().invoke(main, ["sim", *args, "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    return res.output, json.loads((tmp_path / "o" / "config.json").read_text())


def test_sim_runs_a_verl_config_and_the_command_line_wins(tmp_path):
    out, cfg = _sim(tmp_path, "--verl-config", str(SPLIT), "--steps", "2", "--prompts", "8")
    assert out.startswith(f"verl config {SPLIT} (sync):")
    assert "given on the command line instead: --prompts" in out
    assert "ignored 124 field(s), no simulator meaning: actor_rollout_ref.actor.clip_ratio" in out
    assert "scenario gsm8k: 2 steps x 8 prompts, 4 workers" in out
    assert cfg["controllers"] == ["static:1"] and cfg["run"]["prompts"] == 8
    assert cfg["pipelines"][0]["placement"] == "colocated"
    assert cfg["verl_config"]["mode"] == "sync" and cfg["engine"]["n_workers"] == 4
    assert cfg["lengths"]["max_response_length"] == 512


def test_dotted_keys_dynamic_sampling_and_a_known_model_with_gpu(tmp_path):
    f = tmp_path / "dapo.yaml"
    f.write_text(DAPO)
    m = load(f)
    assert m.settings["dynamic_sampling"] and m.settings["max_gen_batches"] == 10
    assert m.settings["gen_batch_factor"] == 3.0 and m.settings["workers"] == 8
    out, cfg = _sim(tmp_path, "--verl-config", str(f), "--gpu", "h100")
    assert cfg["model"] == "qwen2.5-7b" and cfg["tp"] == 2 and cfg["run"]["steps"] == 3
    assert cfg["controllers"] == ["static:8"] and "dynamic_sampling" in json.dumps(cfg)


def test_the_options_that_win_are_named_as_help_lists_them(tmp_path):
    out, cfg = _sim(
        tmp_path, "--verl-config", str(SPLIT), "--steps", "2", "--controller", "static:2"
    )
    (line,) = [x for x in out.splitlines() if x.startswith("given on the command line instead")]
    assert line.endswith(": --controller") and cfg["controllers"] == ["static:2"]


def test_scenario_from_verl_writes_a_scenario_sim_loads(tmp_path):
    out = tmp_path / "split.json"
    res = CliRunner().invoke(main, ["scenario", "from-verl", str(SPLIT), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "run it: rolloutlab sim --calibration" in res.output
    assert "--updates-per-batch 4 --out" in res.output  # ceil(1024 / 256) x 1 epoch
    assert "--controller static:1 --pipeline sync --placement colocated" in res.output
    sc = load_scenario(out)
    assert sc.name == "ppo_trainer_split" and sc.engine.n_workers == 4
    assert sc.lengths.max_response_length == 512 and sc.defaults["prompts"] == 1024
    assert sc.source["provenance"]["verl_config"]["path"] == str(SPLIT)


def test_the_fully_async_cap_drops_no_group_as_verl_drops_none(tmp_path):
    _sim(tmp_path, "--verl-config", str(ASYNC), "--prompts", "16", "--steps", "40")
    row = pl.read_csv(tmp_path / "o" / "summary.csv").row(0, named=True)
    assert row["pipeline"].startswith("async:9:") and row["dropped"] == 0
    assert row["staleness_max"] <= 9  # the lag the threshold allowed stays under S


def test_lr_token_budget_chunked_prefill_kv_memory_and_rollout_mode_are_mapped(tmp_path):
    """verl fields the simulator has a meaning for are mapped, not listed as ignored."""
    m = load(SPLIT)
    arr = "actor_rollout_ref."
    for f in ("actor.optim.lr", "rollout.max_num_batched_tokens", "rollout.enable_chunked_prefill",
              "rollout.gpu_memory_utilization"):  # fmt: skip
        assert arr + f not in m.ignored and arr + f in {r.field for r in m.rows}
    s = m.settings
    assert s["lr"] == 1e-6 and s["max_num_batched_tokens"] == 8192
    assert s["chunked_prefill"] is True and s["gpu_memory_utilization"] == 0.5
    sc = scenario_from_dict(apply_to_calibration(load_scenario("gsm8k").source, m))
    assert sc.engine.max_num_batched_tokens == 8192 and sc.engine.chunked_prefill
    assert sc.engine.gpu_memory_utilization == 0.5 and sc.defaults["lr"] == 1e-6
    # the KV cache of the roofline holds what half of each GPU's memory holds
    placed = apply_overrides(sc, model="qwen2.5-7b", gpu="h100", tp=2)
    h100, qwen = get_gpu("h100"), get_model("qwen2.5-7b")
    kv_tokens = (2 * 0.5 * h100.memory_bytes - qwen.weight_bytes()) // qwen.kv_bytes_per_token()
    assert placed.engine.kv_blocks == int(kv_tokens) // 16
    # rollout.mode: async servers take each request by least load, sync a prompt's group
    for mode, dispatch in (("async", "least_loaded"), ("sync", "group")):
        f = tmp_path / f"{mode}.yaml"
        f.write_text(DAPO + f"actor_rollout_ref.rollout.mode: {mode}\n")
        m = load(f)
        assert m.settings["dispatch"] == dispatch and not any("mode" in k for k in m.ignored)
    f.write_text(DAPO + "actor_rollout_ref.actor.optim.lr: 3.0e-6\n")
    _, cfg = _sim(tmp_path, "--verl-config", str(f), "--steps", "1", "--prompts", "4")
    assert cfg["run"]["lr"] == 3e-6  # the learning gain's lr / lr_ref


def _mapped(tmp_path, text: str):
    f = tmp_path / "verl.yaml"
    f.write_text(text)
    return f, load(f)


def test_updates_per_batch_are_mini_batches_times_epochs(tmp_path):
    # 96 prompts in mini-batches of 40: 40, 40, 16 (verl's split keeps the short one), twice
    _, m = _mapped(
        tmp_path,
        """
data.train_batch_size: 96
actor_rollout_ref.actor: {ppo_mini_batch_size: 40, ppo_epochs: 2}
""",
    )
    assert m.settings["updates_per_batch"] == 6
    rows = {r.field: r for r in m.rows}
    assert rows["actor_rollout_ref.actor.ppo_mini_batch_size"].note == (
        "K = ceil(B 96 / 40) x ppo_epochs 2 = 6"
    )
    assert "actor_rollout_ref.actor.ppo_epochs" in rows
    assert not any("ppo_" in k for k in m.ignored)


def test_updates_per_batch_without_epochs_take_verls_default_one(tmp_path):
    _, m = _mapped(
        tmp_path, "data: {train_batch_size: 64}\nactor_rollout_ref.actor.ppo_mini_batch_size: 16\n"
    )
    assert m.settings["updates_per_batch"] == 4
    (row,) = [r for r in m.rows if r.field.endswith("ppo_mini_batch_size")]
    assert "ppo_epochs not set: verl's default 1" in row.note


def test_a_file_without_mini_batch_sets_no_updates_and_says_so(tmp_path):
    _, m = _mapped(tmp_path, "data: {train_batch_size: 64}\n")
    assert "updates_per_batch" not in m.settings
    assert "actor_rollout_ref.actor.ppo_mini_batch_size" in m.missing


def test_fully_async_updates_per_batch_are_required_batches_times_epochs(tmp_path):
    # B = require_batches x ppo_mini_batch_size = 4 x 32 = 128: 4 mini-batches, 2 epochs
    _, m = _mapped(
        tmp_path,
        """
async_training: {require_batches: 4, staleness_threshold: 0.5}
actor_rollout_ref.actor: {ppo_mini_batch_size: 32, ppo_epochs: 2}
""",
    )
    assert m.settings["prompts"] == 128 and m.settings["updates_per_batch"] == 8
    (row,) = [r for r in m.rows if r.field.endswith("ppo_mini_batch_size")]
    assert row.note == "B = 4 x 32; K = ceil(B 128 / 32) x ppo_epochs 2 = 8"


def test_sim_uses_the_files_updates_unless_given_and_says_which(tmp_path):
    f, _ = _mapped(
        tmp_path,
        """
data.train_batch_size: 8
actor_rollout_ref.rollout.n: 2
actor_rollout_ref.actor: {ppo_mini_batch_size: 4, ppo_epochs: 2}
""",
    )
    out, cfg = _sim(tmp_path, "--verl-config", str(f), "--steps", "2", "--no-figure")
    assert (
        "updates per batch K = 4: from the verl config, K = ceil(B 8 / 4) x ppo_epochs 2 = 4" in out
    )
    assert cfg["run"]["updates_per_batch"] == 4
    res = CliRunner().invoke(
        main,
        ["sim", "--verl-config", str(f), "--steps", "2", "--no-figure",
         "--updates-per-batch", "2", "--out", str(tmp_path / "o2")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "updates per batch K = 2: --updates-per-batch (the verl config's is 4)" in res.output
    assert "given on the command line instead: --updates-per-batch" in res.output
    cfg2 = json.loads((tmp_path / "o2" / "config.json").read_text())
    assert cfg2["run"]["updates_per_batch"] == 2


def test_sim_refuses_file_updates_that_do_not_divide_the_batch_in_one_line(tmp_path):
    # ceil(8 / 3) x 1 = 3 mini-batches (3, 3, 2 prompts in verl); the simulator needs K | B
    f, _ = _mapped(
        tmp_path, "data.train_batch_size: 8\nactor_rollout_ref.actor.ppo_mini_batch_size: 3\n"
    )
    res = CliRunner().invoke(main, ["sim", "--verl-config", str(f), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2
    (line,) = [x for x in res.output.splitlines() if x.startswith("Error")]
    assert "K = 3 updates per batch, which does not divide B = 8" in line
    assert "--updates-per-batch" in line and not (tmp_path / "o").exists()
