"""A real run's config keys of earlier versions are read under their name now, with a
note: ``max_response_tokens`` is ``max_response_length`` (the simulator's and verl's word)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
from rolloutlab.analysis.inputs.run_input import load_run
from rolloutlab.real.rundir import folder
from rolloutlab.real.rundir.async_config import AsyncConfig
from rolloutlab.real.rundir.config import (
    ConfigError,
    SyncConfig,
    read_renamed_keys,
    with_earlier_keys,
)
from rolloutlab.sim.pipelines.spec import DEFAULT_MAX_GEN_BATCHES

from rolloutlab.commands.grid.store import GridResumeError, GridStore
from tests.compare_helpers import write_run
from tests.real_helpers import tiny_config


def _old(d: dict) -> dict:
    d = dict(d)
    d["max_response_tokens"] = d.pop("max_response_length")
    return d


def test_an_old_key_is_read_under_its_name_now_with_a_note(caplog):
    cfg = tiny_config(max_response_length=24)
    with caplog.at_level(logging.WARNING):
        assert SyncConfig.from_dict(_old(cfg.to_dict())) == cfg
    assert caplog.messages == [
        "note: config: config key max_response_tokens is read as max_response_length"
    ]


def test_an_asynchronous_run_reads_the_old_key_of_its_sync_block():
    acfg = AsyncConfig(sync=tiny_config(max_response_length=20), pipeline="bounded:2")
    d = acfg.to_dict()
    d["sync"] = _old(d["sync"])
    assert AsyncConfig.from_dict(d) == acfg


def test_both_spellings_are_refused():
    d = tiny_config().to_dict()
    d["max_response_tokens"] = 24
    with pytest.raises(ConfigError, match="both max_response_tokens"):
        SyncConfig.from_dict(d)


def test_a_run_made_before_the_rename_resumes_with_its_cap_given(tmp_path, caplog):
    cfg = tiny_config(max_response_length=24)
    folder.write_config(tmp_path, "old-run", cfg)
    path = tmp_path / "config.json"
    doc = json.loads(path.read_text())
    doc["config"] = _old(doc["config"])
    path.write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING):
        run_id, resumed = folder.open_existing(tmp_path, {"max_response_length": 24, "steps": 5})
    assert (run_id, resumed) == ("old-run", tiny_config(max_response_length=24, steps=5))
    assert any(str(path) in m and "max_response_tokens" in m for m in caplog.messages)
    stored = json.loads(path.read_text())["config"]
    assert stored["max_response_length"] == 24 and "max_response_tokens" not in stored
    with pytest.raises(folder.RunDirError, match="max_response_length=24"):
        folder.open_existing(tmp_path, {"max_response_length": 30})


def test_the_note_reaches_stderr_without_logging_set_up():
    code = (
        "from rolloutlab.real.rundir.config import SyncConfig; "
        "SyncConfig.from_dict({'max_response_tokens': 30})"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert (
        out.stderr
        == "note: config: config key max_response_tokens is read as max_response_length\n"
    )


def test_a_compared_run_reads_the_old_cap(tmp_path):
    run = write_run(tmp_path / "run", [4, 4])
    path = run / "config.json"
    doc = json.loads(path.read_text())
    doc["config"] = _old(doc["config"]) | {"max_response_tokens": 50}
    path.write_text(json.dumps(doc))
    assert load_run(run).max_response_length == 50


def test_the_earlier_spelling_is_the_inverse_of_the_reading():
    d = AsyncConfig(sync=tiny_config(), pipeline="bounded:2").to_dict()
    earlier = with_earlier_keys(d)
    assert earlier["sync"]["max_response_tokens"] == 24
    assert "max_response_length" not in earlier["sync"]
    assert read_renamed_keys(earlier) == d


def test_a_grid_stored_under_its_earlier_spelling_resumes(tmp_path):
    spec = {"base": AsyncConfig(sync=tiny_config()).to_dict()}
    earlier = {"base": with_earlier_keys(spec["base"])}
    points = [{"S": 1}, {"S": 2}]
    GridStore(tmp_path, "real stability", earlier, points).open(resume=False)
    with pytest.raises(GridResumeError, match="holds another grid"):
        GridStore(tmp_path, "real stability", spec, points).check_resume()
    GridStore(tmp_path, "real stability", spec, points, [earlier]).check_resume()


def test_real_runs_cap_refill_rounds_as_the_simulator_does():
    """One default for ``--max-gen-batches`` (verl's DAPO recipe); a config written before
    the field existed reads as 0 (unlimited), what its run had."""
    from rolloutlab.commands.real.group import sync

    (opt,) = [p for p in sync.params if p.name == "max_gen_batches"]
    assert opt.default == SyncConfig().max_gen_batches == DEFAULT_MAX_GEN_BATCHES == 10
    d = tiny_config().to_dict()
    del d["max_gen_batches"]
    assert SyncConfig.from_dict(d).max_gen_batches == 0
