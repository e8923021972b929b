"""``--clip``, ``--is-mode``, ``--is-cap`` on ``rolloutlab real sync`` / ``real async``:
recorded in config.json and passed to the learner's loss; bad values refused."""

import json

import click
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")

from rolloutlab.real.policy import learner

from rolloutlab.cli import main
from rolloutlab.commands.real.group import async_cmd, sync
from rolloutlab.commands.real.loss_options import LOSS_OPTIONS
from rolloutlab.commands.real.stability import stability_cmd

TINY = [
    "--steps", "1", "--warm-start-steps", "0", "--prompts", "1", "--controller", "static:2",
    "--eval-size", "1", "--eval-every", "1", "--max-response-length", "8", "--no-cache", "--quiet",
]  # fmt: skip


@pytest.mark.parametrize(
    "command, loss",
    [
        ("sync", ["--clip", "off", "--is-mode", "sequence", "--is-cap", "1.5"]),
        ("async", ["--clip", "off", "--is-mode", "off", "--is-cap", "3"]),
        ("sync", []),  # the defaults: LearnerConfig's
    ],
)
def test_the_loss_options_reach_the_learner_and_config_json(tmp_path, monkeypatch, command, loss):
    # the learner object itself (its cfg is what Learner._step hands grpo_loss; the loss's
    # response to each setting: tests/test_grpo_mechanisms.py); a 1-step run with no reward
    # keeps no group, so the loss itself is not called here
    seen = []
    init = learner.Learner.__init__

    def spy(self, model, reference, cfg):
        init(self, model, reference, cfg)
        seen.append((self.cfg.clip, self.cfg.is_mode, self.cfg.is_cap))

    monkeypatch.setattr(learner.Learner, "__init__", spy)
    out = tmp_path / "run"
    res = CliRunner().invoke(main, ["real", command, "--out", str(out), *TINY, *loss])
    assert res.exit_code == 0, res.output
    expected = {
        "clip": "--clip" not in loss,
        "is_mode": dict(zip(loss[::2], loss[1::2])).get("--is-mode", "token"),
        "is_cap": float(dict(zip(loss[::2], loss[1::2])).get("--is-cap", 2.0)),
    }
    stored = json.loads((out / "config.json").read_text())["config"]
    stored = stored.get("sync", stored)["learner"]
    assert {k: stored[k] for k in expected} == expected
    assert seen and set(seen) == {tuple(expected.values())}


def test_the_three_commands_take_the_same_loss_options_and_clip_is_a_bool():
    # bad values of each option: tests/bad_input_cases.py (real-clip, real-is-mode, ...)
    for cmd in (sync, async_cmd, stability_cmd):
        params = {p.name: p for p in cmd.params}
        ctx = click.Context(cmd)
        assert params["clip"].process_value(ctx, "off") is False
        assert params["clip"].process_value(ctx, "on") is True
        for opt in LOSS_OPTIONS:
            decl = opt(lambda: None).__click_params__[0]
            assert params[decl.name].default == decl.default, (cmd.name, decl.name)
            assert params[decl.name].help == decl.help, (cmd.name, decl.name)
