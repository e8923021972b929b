"""Grid executors: local and Ray give the same tables, a raising point is retried then
recorded, a killed grid resumes to the same table, and bad executor input is one line,
exit 2, nothing lost. One local Ray runtime (2 CPUs) serves the whole module."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from rolloutlab.cli import main
from rolloutlab.commands.grid.executor import LocalExecutor, RayExecutor
from rolloutlab.commands.grid.options import run_points
from rolloutlab.commands.grid.store import GridStore
from tests.cli_helpers import assert_refused, invoke_on

ray = pytest.importorskip("ray")
ROOT = Path(__file__).resolve().parents[1]
SWEEP = "--steps 3 --prompts 2,4 --workers 1,2 --seeds 0,1 --controller static:2,sagc".split()
STABILITY = "stability --S 0,2,8 --lr 0.01,0.05,0.2 --steps 200 --seeds 2".split()


@pytest.fixture(scope="module", autouse=True)
def ray_runtime():
    """One local Ray runtime for the module; its workers can import ``tests``."""
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}},
    )
    yield
    ray.shutdown()


def flaky(point: dict, marks: str, fail_times: int) -> pl.DataFrame:
    """Raise the first ``fail_times`` calls for ``point`` (counted in files under
    ``marks``, so the count survives worker processes), then return one row."""
    k = point["k"]
    tries = len([p for p in os.listdir(marks) if p.startswith(f"{k}-")])
    Path(marks, f"{k}-{tries}").touch()
    if tries < fail_times:
        raise RuntimeError(f"point {k} broke (try {tries + 1})")
    return pl.DataFrame({"k": [k], "value": [k * 1.5]})


def test_local_and_ray_sweeps_write_identical_tables(tmp_path, calibration_file):
    outs = {}
    for name, extra in (("local", []), ("ray", ["--executor", "ray", "--max-parallel", "2"])):
        outs[name] = tmp_path / name
        res = invoke_on("sweep", calibration_file, outs[name], *SWEEP, *extra)
        assert res.exit_code == 0, res.output
    local = pl.read_csv(outs["local"] / "runs.csv")
    assert local.height == 2 * 2 * 2 * 2 and set(local["status"]) == {"ok"}
    assert local.equals(pl.read_csv(outs["ray"] / "runs.csv"))
    assert (outs["local"] / "means.csv").read_bytes() == (outs["ray"] / "means.csv").read_bytes()


def test_local_and_ray_stability_grids_are_identical(tmp_path):
    runner = CliRunner()
    for name, extra in (("local", []), ("ray", ["--executor", "ray"])):
        res = runner.invoke(main, [*STABILITY, "--out", str(tmp_path / name), *extra])
        assert res.exit_code == 0, res.output
    a, b = (pl.read_csv(tmp_path / n / "stability.csv") for n in ("local", "ray"))
    assert a.height == 3 * 3 * 2 and a.equals(b)


FAILS = {0: 0, 1: 1, 2: 3}
"""Calls that raise per point ``k``: 1 is saved by a retry, 2 is not (retries=1)."""


def by_plan(marks: str, point: dict) -> pl.DataFrame:
    """:func:`flaky` with point ``k`` failing ``FAILS[k]`` times."""
    return flaky(point, marks, FAILS[point["k"]])


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_a_raising_point_is_retried_then_recorded(tmp_path, executor):
    marks = tmp_path / "marks"
    marks.mkdir()
    points = [{"k": 0}, {"k": 1}, {"k": 2}]
    ex = LocalExecutor(retries=1) if executor == "local" else RayExecutor(retries=1)
    store = GridStore(tmp_path, "test", {"case": 1}, points)
    run_points(ex, store, functools.partial(by_plan, str(marks)), False, "t")
    table = store.table()
    assert table["status"].to_list() == ["ok", "ok", "failed"]
    assert table["value"].to_list() == [0.0, 1.5, None]
    assert table["error"].to_list() == [None, None, "RuntimeError: point 2 broke (try 2)"]
    assert [store.done[i]["attempts"] for i in range(3)] == [1, 2, 2]
    assert len(os.listdir(marks)) == 1 + 2 + 2  # never more tries than 1 + retries


def test_a_killed_grid_resumes_to_the_same_table(tmp_path, calibration_file):
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert invoke_on("sweep", calibration_file, full, *SWEEP).exit_code == 0
    assert invoke_on("sweep", calibration_file, cut, *SWEEP).exit_code == 0
    lines = (cut / "grid.jsonl").read_text().splitlines(keepends=True)
    # killed after 3 of 8 points, the 4th line half written; no tables yet
    (cut / "grid.jsonl").write_text("".join(lines[:4]) + lines[4][:50])
    for name in ("runs.csv", "means.csv", "sweep.png"):
        (cut / name).unlink()
    res = invoke_on("sweep", calibration_file, cut, *SWEEP, "--resume")
    assert res.exit_code == 0, res.output
    assert (cut / "runs.csv").read_bytes() == (full / "runs.csv").read_bytes()
    kept = (cut / "grid.jsonl").read_text().splitlines(keepends=True)
    assert kept[:4] == lines[:4] and len(kept) == len(lines)  # nothing rerun twice


def test_resume_folder_of_another_grid_is_refused_and_kept(tmp_path):
    out = tmp_path / "g"
    runner = CliRunner()
    assert runner.invoke(main, [*STABILITY, "--out", str(out)]).exit_code == 0
    before = (out / "grid.jsonl").read_bytes()
    res = runner.invoke(main, [*STABILITY, "--seeds", "3", "--out", str(out), "--resume"])
    assert res.exit_code == 2 and "holds another grid" in res.output
    assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output
    assert (out / "grid.jsonl").read_bytes() == before


def test_resume_without_a_grid_file_is_refused(tmp_path):
    res = CliRunner().invoke(main, [*STABILITY, "--out", str(tmp_path / "new"), "--resume"])
    assert_refused(res, "no grid to resume", tmp_path / "new")


def test_unreachable_ray_address_is_one_line(tmp_path, calibration_file):
    out = tmp_path / "o"
    res = invoke_on(
        "sweep", calibration_file, out, *SWEEP, "--executor", "ray", "--ray-address", "127.0.0.1:1"
    )
    assert_refused(res, "--ray-address 127.0.0.1:1: cannot reach a Ray cluster", out)


def test_ray_not_installed_is_one_line(tmp_path, calibration_file, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    out = tmp_path / "o"
    res = invoke_on("sweep", calibration_file, out, *SWEEP, "--executor", "ray")
    assert_refused(
        res, "Ray is not installed (the 'ray' extra); pip install 'rolloutlab[ray]'", out
    )


def test_ray_options_need_the_ray_executor(tmp_path, calibration_file):
    out = tmp_path / "o"
    res = invoke_on("sweep", calibration_file, out, *SWEEP, "--ray-address", "auto")
    assert_refused(res, "needs --executor ray", out)


def test_advise_on_ray_tries_the_same_trials_as_locally(tmp_path):
    tiny = (
        "advise --controller static:2,static:4 --prompts 4 --workers 1,2 --max-num-seqs 64 "
        "--pipeline sync,bounded:2 --lr 1e-6,4e-6 --steps 15 --trials 6 --parallel-trials 3"
    ).split()
    runner = CliRunner()
    for name, extra in (("local", []), ("ray", ["--executor", "ray", "--max-parallel", "2"])):
        res = runner.invoke(main, [*tiny, "--out", str(tmp_path / name), *extra])
        assert res.exit_code == 0, res.output
    a, b = (pl.read_csv(tmp_path / n / "trials.csv") for n in ("local", "ray"))
    # the search's 6 trials and the polish's (the same settings on either executor)
    assert a.filter(pl.col("origin") == "search").height == 6 and a.equals(b)


def test_local_worker_processes_give_the_same_grid(tmp_path):
    runner = CliRunner()
    for name, extra in (("one", []), ("two", ["--max-parallel", "2"])):
        res = runner.invoke(main, [*STABILITY, "--out", str(tmp_path / name), *extra])
        assert res.exit_code == 0, res.output
    a, b = (pl.read_csv(tmp_path / n / "stability.csv") for n in ("one", "two"))
    assert a.equals(b)
