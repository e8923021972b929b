"""TRL's GRPOTrainer with G set per step by rolloutlab controllers (real.integrations.trl).

A 2-layer random-weight Llama (the project's tiny config), the task tokenizer, CPU,
``bf16=False``; B = 2 prompts, G <= 4, responses capped at 8 tokens, a few steps each.
Not skipped without trl: ``make venv`` installs the 'trl' extra, and a missing one fails here.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.real.integrations.frameworks import (
    FrameworkError,
    check_version,
    installed_version,
)
from rolloutlab.real.integrations.group_rules import GroupSizeError, group_size_problem
from rolloutlab.real.integrations.task_data import digit_chain_dataset
from rolloutlab.real.integrations.trl import STATE_FILE, GroupSizeGRPOTrainer, loss_history
from rolloutlab.real.integrations.verl import group_size_trainer
from rolloutlab.real.policy.model import CONFIG_DIR
from rolloutlab.real.tasks.digit_chain import Problem
from rolloutlab.real.tasks.hf_tokenizer import task_tokenizer
from rolloutlab.real.tasks.tokenizer import BOS_ID, encode
from transformers import LlamaConfig, LlamaForCausalLM
from trl import GRPOConfig, GRPOTrainer

from rolloutlab.cli import main

ROOT = Path(__file__).resolve().parents[1]

CYCLE = textwrap.dedent(
    """
    class Cycle:
        '''Proposes the sizes of ``sizes`` in turn (a user's plug-in controller).'''
        name = "cycle"

        def __init__(self, sizes="2/4/2"):
            self.sizes = [int(g) for g in sizes.split("/")]
            self.t = 0
            self.seen = []

        def propose(self):
            return self.sizes[self.t % len(self.sizes)]

        def observe(self, lengths):
            self.seen.append([len(g) for g in lengths])
            self.t += 1

        def state_dict(self):
            return {"t": self.t, "seen": self.seen}

        def load_state_dict(self, state):
            self.t, self.seen = state["t"], state["seen"]
    """
)


def parity_reward(completion_ids, **_):
    """A 0/1 reward with spread under a random policy: 1 when the first token id is even."""
    return [float(ids[0] % 2 == 0) for ids in completion_ids]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    """A folder holding the random-weight tiny Llama (TRL loads its reference model by path)."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig.from_json_file(str(CONFIG_DIR / "config.json")))
    path = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(path)
    return str(path)


def config(out, steps=3, **kw) -> GRPOConfig:
    base = dict(
        output_dir=str(out),
        use_cpu=True,
        bf16=False,
        num_generations=4,  # the largest G: budget B x 4 = 8 rollouts
        per_device_train_batch_size=8,
        max_completion_length=8,
        max_steps=steps,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=0,
        disable_tqdm=True,
    )
    return GRPOConfig(**(base | kw))


def trainer(model, out, controller, steps=3, cls=GroupSizeGRPOTrainer, **kw):
    extra = {"controller": controller, "trace_dir": out / "trace"} if controller else {}
    return cls(
        model=model,
        args=config(out, steps, **kw),
        processing_class=task_tokenizer(),
        reward_funcs=parity_reward,
        train_dataset=digit_chain_dataset(16, seed=0),
        **extra,
    )


def logged(tr, key):
    return [row[key] for row in tr.state.log_history if key in row]


@pytest.fixture
def cycle_spec(tmp_path):
    path = tmp_path / "cycle.py"
    path.write_text(CYCLE)
    return f"{path}:Cycle"


def test_user_controller_changes_G_between_steps_and_groups_normalise_alone(
    tiny_model, tmp_path, cycle_spec, monkeypatch
):
    tr = trainer(tiny_model, tmp_path, cycle_spec)
    batches = []
    trl_step = GRPOTrainer._generate_and_score_completions

    def seen_by_trl(self, inputs):  # what the subclass hands TRL, and TRL's advantages
        out = trl_step(self, inputs)
        batches.append((len(inputs), self.num_generations, list(self._round.rewards), out))
        return out

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", seen_by_trl)
    tr.train()
    assert [b[0] for b in batches] == [4, 8, 4]  # B x G rows generated per step
    assert logged(tr, "rolloutlab/group_size") == [2.0, 4.0, 2.0]
    assert tr.controller.seen == [[2, 2], [4, 4], [2, 2]]  # (B, G) lengths observed
    for n, G, rewards, out in batches:
        r = np.asarray(rewards).reshape(n // G, G)  # (B, G)
        want = (r - r.mean(1, keepdims=True)) / (r.std(1, ddof=1, keepdims=True) + 1e-4)
        np.testing.assert_allclose(out["advantages"].numpy(), want.reshape(-1), atol=1e-5)

    rollouts = pl.read_parquet(tmp_path / "trace" / "rollouts.parquet")
    steps = pl.read_parquet(tmp_path / "trace" / "steps.parquet")
    per_step = rollouts.group_by("step", maintain_order=True).agg(
        pl.len(), pl.col("group_size").first(), pl.col("prompt_id").n_unique()
    )
    assert per_step.rows() == [(0, 4, 2, 2), (1, 8, 4, 2), (2, 4, 2, 2)]
    assert steps["step"].to_list() == [0, 1, 2]
    assert (rollouts["t_finish"] >= rollouts["t_first_token"]).all()
    lengths = rollouts.partition_by("step", maintain_order=True)
    ratios = [float(d["response_tokens"].max() / d["response_tokens"].median()) for d in lengths]
    assert logged(tr, "rolloutlab/straggler_ratio") == pytest.approx(ratios)
    # a length-8 rollout without EOS hit the cap
    capped = rollouts.filter(pl.col("finish_reason") == "length")["response_tokens"]
    assert (capped == 8).all()
    # rolloutlab's readers take the TRL run as they take a `real sync` run
    out = tmp_path / "cal.json"
    res = CliRunner().invoke(
        main,
        ["calibrate", "groups", str(tmp_path / "trace" / "rollouts.parquet"), "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    fitted = json.loads(out.read_text())
    assert fitted["format"] == "rolloutlab.calibration" and fitted["lengths"]


def test_static_G_trains_exactly_as_plain_trl(tiny_model, tmp_path):
    # beta > 0: the KL term makes the logged loss non-zero once the policy moved (the
    # on-policy policy term of capped, equal-length responses sums to 0)
    ours = trainer(tiny_model, tmp_path / "ours", "static:4", beta=0.1)
    ours.train()
    plain = trainer(tiny_model, tmp_path / "plain", None, cls=GRPOTrainer, beta=0.1)
    plain.train()
    losses = loss_history(ours)
    assert len(losses) == 3 and any(abs(v) > 1e-6 for v in losses)  # a check that can fail
    assert losses == pytest.approx(loss_history(plain), rel=1e-5, abs=1e-7)
    assert logged(ours, "grad_norm") == pytest.approx(logged(plain, "grad_norm"), rel=1e-5)
    for (name, a), b in zip(ours.model.named_parameters(), plain.model.parameters()):
        torch.testing.assert_close(a, b, msg=name)


def test_checkpoint_restores_the_controller_and_each_step_is_traced_once(
    tiny_model, tmp_path, cycle_spec
):
    first = trainer(tiny_model, tmp_path, cycle_spec, steps=2, save_strategy="steps", save_steps=2)
    first.train()
    ckpt = tmp_path / "checkpoint-2"
    assert json.loads((ckpt / STATE_FILE).read_text())["controller"]["t"] == 2
    resumed = trainer(tiny_model, tmp_path, cycle_spec, steps=3)
    resumed.train(resume_from_checkpoint=str(ckpt))
    assert resumed.controller.seen == [[2, 2], [4, 4], [2, 2]]  # step 2 proposed G = 2
    rollouts = pl.read_parquet(tmp_path / "trace" / "rollouts.parquet")
    assert rollouts.group_by("step").len().sort("step")["len"].to_list() == [4, 8, 4]
    assert rollouts["run_id"].n_unique() == 1


def test_a_G_above_the_budget_is_refused_before_its_step(tiny_model, tmp_path):
    (tmp_path / "grow.py").write_text(CYCLE)
    tr = trainer(tiny_model, tmp_path, f"{tmp_path / 'grow.py'}:Cycle:sizes=2/8")
    with pytest.raises(GroupSizeError, match=r"step 1: G=8: B x G = 2 x 8 = 16 rollouts exceeds"):
        tr.train()
    steps = [json.loads(line)["step"] for line in open(tmp_path / "trace" / "steps.jsonl")]
    assert steps == [0]  # the finished step is kept; the refused one generated nothing
    with pytest.raises(GroupSizeError, match="candidates: G=8"):
        trainer(tiny_model, tmp_path / "b", "sagc:candidates=2/4/8")


def test_refuses_settings_it_was_not_written_for(tiny_model, tmp_path):
    with pytest.raises(ValueError, match="steps_per_generation=2 != gradient_accumulation_steps=1"):
        trainer(tiny_model, tmp_path, "static:2", steps_per_generation=2)
    with pytest.raises(ValueError, match="controller spec 'nope.py:X'"):
        trainer(tiny_model, tmp_path, "nope.py:X")


def test_a_fresh_run_refuses_a_trace_directory_holding_a_run(tiny_model, tmp_path):
    trainer(tiny_model, tmp_path, "static:2", steps=1).train()
    with pytest.raises(ValueError, match="already holds a run"):
        trainer(tiny_model, tmp_path, "static:2", steps=1).train()


@pytest.mark.parametrize(
    ("G", "B", "budget", "div", "rule"),
    [
        (1, 4, 64, 1, "G >= 2"),
        (32, 4, 64, 1, "4 x 32 = 128 rollouts exceeds the generation budget of 64"),
        (3, 3, 64, 2, "9 rollouts is not a multiple of steps_per_generation = 2"),
    ],
)
def test_group_rules_name_the_value_and_the_rule(G, B, budget, div, rule):
    assert rule in group_size_problem(G, B, budget, {"steps_per_generation": div})
    assert group_size_problem(4, 4, 64, {"steps_per_generation": 2}) is None


@pytest.mark.parametrize(
    ("name", "found", "text", "install"),
    [
        ("trl", None, "trl is not installed", "rolloutlab[trl]"),
        ("trl", "1.15.0", "found trl 1.15.0", "rolloutlab[trl]"),
        ("verl", None, "verl is not installed", "verl==0.9.1"),
        ("verl", "0.8.0", "written for verl 0.9.1; found verl 0.8.0", "verl==0.9.1"),
    ],
)
def test_a_missing_or_other_framework_is_one_line_naming_how_to_install(name, found, text, install):
    with pytest.raises(FrameworkError) as err:
        check_version(name, found)
    msg = str(err.value)
    assert text in msg and install in msg and "\n" not in msg


def test_a_framework_whose_metadata_is_there_but_package_is_not_is_one_line(monkeypatch):
    # The distribution's metadata says trl 1.16.0 but the package itself does not import
    # (a partial install): the refusal is the same one line with the install hint.
    from rolloutlab.real.integrations import frameworks

    monkeypatch.setattr(frameworks, "installed_version", lambda name: "1.16.0")
    monkeypatch.setitem(sys.modules, "trl", None)
    with pytest.raises(FrameworkError) as err:
        frameworks.require("trl")
    msg = str(err.value)
    assert msg.startswith("trl 1.16.0 does not import (") and "rolloutlab[trl]" in msg
    assert "\n" not in msg


def test_the_verl_trainer_without_verl_is_refused_in_one_line():
    if installed_version("verl") is not None:
        pytest.skip("verl is installed here (bench/verl_cpu_env.sh): the refusal cannot show")
    with pytest.raises(FrameworkError, match=r"^verl is not installed: pip install --no-deps verl"):
        group_size_trainer()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=16), st.booleans())
def test_task_tokenizer_encodes_as_the_task_does(digits, long):
    tok = task_tokenizer()
    p = Problem(tuple(digits))
    assert tok(p.prompt_text)["input_ids"] == p.prompt_ids
    solution = p.solution_text(long)
    assert tok(solution)["input_ids"] == [BOS_ID, *encode(solution)]
    assert tok.decode(p.solution_ids(long), skip_special_tokens=True) == solution


def test_the_readme_example_runs_and_prints_the_trace_it_wrote(
    tiny_model, tmp_path, cycle_spec, capsys
):
    spec = importlib.util.spec_from_file_location(
        "trl_example", ROOT / "examples" / "trl_group_size.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    out = tmp_path / "run"
    argv = ["--out", str(out), "--model", tiny_model, "--controller", cycle_spec, "--steps", "3",
            "--prompts", "2", "--max-group-size", "4", "--max-response-length", "8"]  # fmt: skip
    assert example.main(argv) == 0
    printed = capsys.readouterr().out
    rollouts = pl.read_parquet(out / "rolloutlab" / "rollouts.parquet")
    assert rollouts.group_by("step", maintain_order=True).len()["len"].to_list() == [4, 8, 4]
    table = example.step_table(out / "rolloutlab")
    assert table["G"].to_list() == [2, 4, 2]  # the plug-in controller's 2/4/2
    ratio = rollouts.filter(pl.col("step") == 1)["response_tokens"]
    assert table["straggler_ratio"][1] == pytest.approx(ratio.max() / ratio.median(), abs=0.005)
    assert f"trace: {out / 'rolloutlab'}" in printed and "straggler_ratio" in printed
    with pytest.raises(SystemExit):  # an existing --out is refused, nothing overwritten
        example.main(argv)
