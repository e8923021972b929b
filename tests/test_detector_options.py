"""The collapse detector's options are declared once
(rolloutlab/commands/real/detector_options.py) and shared by ``real async`` and ``real stability``;
on ``real async`` they reach the run's config.json and its detector."""

import json

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from rolloutlab.real.runners.collapse import CollapseConfig

from rolloutlab.cli import main
from rolloutlab.commands.real.detector_options import (
    DETECTOR_FIELDS,
    DETECTOR_OPTIONS,
    detector_config,
)
from rolloutlab.commands.real.group import async_cmd
from rolloutlab.commands.real.stability import stability_cmd
from tests.test_real_loss_options import TINY


def test_both_commands_take_the_same_detector_options():
    for cmd in (async_cmd, stability_cmd):
        params = {p.name: p for p in cmd.params}
        for opt in DETECTOR_OPTIONS:
            decl = opt(lambda: None).__click_params__[0]
            assert params[decl.name].default == decl.default, (cmd.name, decl.name)
            assert params[decl.name].help == decl.help, (cmd.name, decl.name)
    defaults = {p.name: p.default for p in async_cmd.params if p.name in DETECTOR_FIELDS}
    assert detector_config(defaults) == CollapseConfig()  # defaults: the detector's own


def test_real_async_records_the_detector_settings(tmp_path):
    out = tmp_path / "run"
    given = ["--kl-max", "3", "--detector-patience", "2", "--release", "0.5",
             "--entropy-frac", "0.4"]  # fmt: skip
    res = CliRunner().invoke(main, ["real", "async", "--out", str(out), *TINY, *given])
    assert res.exit_code == 0, res.output
    stored = json.loads((out / "config.json").read_text())["config"]["collapse"]
    want = {"kl_max": 3.0, "kl_patience": 2, "release": 0.5, "entropy_frac": 0.4}
    assert {k: stored[k] for k in want} == want
    res = CliRunner().invoke(
        main, ["real", "async", "--out", str(out), *TINY, "--resume", "--kl-max", "4"]
    )
    assert res.exit_code == 2 and "collapse.kl_max" in res.output
