"""The bad-input corpus: every case exits 2 with one ``Error:`` line naming the
option, file or field, prints no traceback, and changes, adds or leaves behind nothing.

In-process through click's CliRunner (tests/bad_input_cases.py holds the cases,
tests/bad_input_files.py the bad files); one subprocess test checks the real exit code.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bad_input_cases import CHECKPOINTS, FILES, OPTIONS, OUTPUTS
from tests.bad_input_files import REPO, build
from tests.cli_helpers import check_refusal

CASES = OPTIONS + FILES + OUTPUTS


def test_the_corpus_is_large_and_its_ids_unique():
    ids = [c[0] for c in CASES + CHECKPOINTS]
    assert len(ids) >= 80 and len(set(ids)) == len(ids)


@pytest.mark.parametrize("case_id,args,words", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, case_id, args, words):
    build(tmp_path)
    argv = [a.format(t=tmp_path, r=REPO) for a in args.split()]
    check_refusal(argv, words, tmp_path)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished 2-step tiny real run with checkpoints after steps 1 and 2."""
    pytest.importorskip("torch")
    from rolloutlab.real.runners.sync import run_sync

    from tests.real_helpers import tiny_config

    out = tmp_path_factory.mktemp("real") / "run"
    run_sync(tiny_config(steps=2, checkpoint_every=1), out, progress=False)
    return out


def _drop_step_0(run: Path) -> None:
    lines = (run / "steps.jsonl").read_text().splitlines(keepends=True)
    (run / "steps.jsonl").write_text("".join(x for x in lines if json.loads(x)["step"] != 0))


def _lr_inf(run: Path) -> None:
    doc = json.loads((run / "config.json").read_text())
    doc["config"]["learner"]["lr"] = float("inf")
    (run / "config.json").write_text(json.dumps(doc))  # Python's json writes Infinity


def _lr_negative(run: Path) -> None:
    doc = json.loads((run / "config.json").read_text())
    doc["config"]["learner"]["lr"] = -1.0
    (run / "config.json").write_text(json.dumps(doc))


DAMAGE = {
    "resume-config-lr-neg": _lr_negative,
    "resume-corrupt-weights": lambda run: (
        run / "checkpoints" / "step_000002" / "model.safetensors"
    ).write_bytes(b"not the weights"),
    "resume-gap": _drop_step_0,
    "resume-config-torn": lambda run: (run / "config.json").write_text("{torn"),
    "resume-config-inf": _lr_inf,
    "resume-other-lr": lambda run: None,
    "resume-manifest": lambda run: (run / "checkpoints" / "step_000002" / "manifest.json").unlink(),
}


@pytest.mark.parametrize("case_id,args,words", CHECKPOINTS, ids=[c[0] for c in CHECKPOINTS])
def test_a_damaged_run_is_not_resumed_and_not_changed(tmp_path, finished_run, case_id, args, words):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    DAMAGE[case_id](run)
    argv = [a.format(run=run) for a in args.split()]
    check_refusal(argv, words, tmp_path)


def test_exit_code_2_from_a_real_process(tmp_path):
    """The one subprocess test: the console script's exit code and stderr."""
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "rolloutlab",
            "stability",
            "--S",
            "1,1",
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "repeated item(s) 1" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "o").exists()
