"""Running `rolloutlab sim` / `rolloutlab sweep` in-process in tests (click's CliRunner)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner, Result

from rolloutlab.cli import main


def invoke_on(command: str, calibration: Path, out: Path, *args: str) -> Result:
    """``rolloutlab COMMAND --calibration CALIBRATION ARGS... --out OUT``; the click Result."""
    return CliRunner().invoke(
        main, [command, "--calibration", str(calibration), *args, "--out", str(out)]
    )


def assert_refused(res: Result, message: str, out: Path) -> None:
    """A bad-input refusal: exit code 2, ``message`` in a one-line error (no traceback),
    and ``out`` never created (refused before the output folder is claimed)."""
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output, res.output
    assert not out.exists()
