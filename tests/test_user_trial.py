"""What a new user's trial found (issue 30, item 2) that needs a run first, not a static
bad file (those are in tests/bad_input_cases.py): an interrupted grid rerun without
``--resume``, a user controller's exception, a controller without ``candidates``,
duplicated prompt ids, upper bounds on sizes, and a collapsed real run.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from rolloutlab.cli import main

STABILITY = "stability --S 0,2,4 --lr 0.01,0.1 --steps 50 --seeds 1".split()


def _one_error_line(out: str) -> str:
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in out, out
    return errors[0]


def test_an_interrupted_grid_rerun_without_resume_is_refused_and_kept(tmp_path):
    out = tmp_path / "g"
    runner = CliRunner()
    assert runner.invoke(main, [*STABILITY, "--out", str(out)]).exit_code == 0
    lines = (out / "grid.jsonl").read_text().splitlines(keepends=True)
    (out / "grid.jsonl").write_text("".join(lines[:3]))  # killed after 2 of 3 points (S)
    before = (out / "grid.jsonl").read_bytes()
    res = runner.invoke(main, [*STABILITY, "--out", str(out)])
    assert res.exit_code == 2
    assert "2 of 3 finished points of this grid" in _one_error_line(res.output)
    assert "pass --resume" in res.output
    assert (out / "grid.jsonl").read_bytes() == before  # nothing lost
    res = runner.invoke(main, [*STABILITY, "--out", str(out), "--resume"])
    assert res.exit_code == 0, res.output
    assert (out / "grid.jsonl").read_text().splitlines(keepends=True)[:3] == lines[:3]
    # a finished grid may be run again into its folder (it is replaced, as before)
    assert runner.invoke(main, [*STABILITY, "--out", str(out)]).exit_code == 0


def write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path``; returns ``path``."""
    path.write_text(text)
    return path
