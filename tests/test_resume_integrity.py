"""``--resume`` checks the step and rollout tables against the checkpoint: damaged steps
before it are re-run from the checkpoint before them, or the resume is refused listing
them (never a silent gap); config.json records what each resume ran."""

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from rolloutlab.real.rundir.folder import RunDirError
from rolloutlab.real.rundir.resume_check import damaged_steps
from rolloutlab.real.runners.sync import run_sync
from rolloutlab.sim.trace.schema import read

from tests.real_helpers import tiny_config


def _drop_step(path: Path, step: int) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(x for x in lines if json.loads(x)["step"] != step))


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def four_steps(tmp_path_factory):
    """A finished 4-step run with checkpoints after steps 2 and 4."""
    out = tmp_path_factory.mktemp("run")
    run_sync(tiny_config(steps=4, checkpoint_every=2), out, progress=False)
    return out


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_an_intact_run_has_no_damaged_steps(four_steps):
    assert damaged_steps(four_steps, 4, 2) == []
    assert damaged_steps(four_steps, 4, 3) == [0, 1, 2, 3]  # 2 prompts is not a 3-round


@pytest.mark.parametrize("table", ["steps.jsonl", "rollouts.jsonl"])
def test_a_step_lost_after_a_checkpoint_is_re_run_from_it(four_steps, tmp_path, table):
    run = _copy(four_steps, tmp_path / "r")
    _drop_step(run / table, 3)
    assert damaged_steps(run, 4, 2) == [3]
    run_sync(tiny_config(steps=5), run, resume=True, progress=False, overrides={"steps": 5})
    steps = read(run / "steps.parquet", "steps")["step"].to_list()
    rollouts = read(run / "rollouts.parquet", "rollouts")
    assert steps == [0, 1, 2, 3, 4]
    assert rollouts.group_by("step").len().sort("step")["len"].to_list() == [4] * 5
    resumes = json.loads((run / "config.json").read_text())["resumes"]
    assert resumes == [{"from_step": 2, "to_step": 5, "repaired": [3]}]


def test_a_repeated_step_is_damage_too(four_steps, tmp_path):
    run = _copy(four_steps, tmp_path / "r")
    with open(run / "steps.jsonl") as fh:
        first = fh.readline()
    with open(run / "steps.jsonl", "a") as fh:
        fh.write(first)
    assert damaged_steps(run, 4, 2) == [0]


def test_a_gap_before_every_kept_checkpoint_is_refused_listing_it(four_steps, tmp_path):
    run = _copy(four_steps, tmp_path / "r")
    _drop_step(run / "steps.jsonl", 0)
    _drop_step(run / "rollouts.jsonl", 1)
    before = _snapshot(run)
    with pytest.raises(RunDirError, match=r"step\(s\) 0, 1 before checkpoint step_000004"):
        run_sync(tiny_config(steps=6), run, resume=True, progress=False, overrides={"steps": 6})
    assert _snapshot(run) == before


def test_an_undamaged_resume_is_recorded(four_steps, tmp_path):
    run = _copy(four_steps, tmp_path / "r")
    run_sync(tiny_config(steps=5), run, resume=True, progress=False, overrides={"steps": 5})
    doc = json.loads((run / "config.json").read_text())
    assert doc["resumes"] == [{"from_step": 4, "to_step": 5, "repaired": []}]
    assert doc["config"]["steps"] == 5
