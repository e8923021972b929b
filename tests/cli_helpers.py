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


def _state(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root``: a file's bytes, None for a folder."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def check_refusal(args: list[str], words: str, root: Path) -> None:
    """``rolloutlab ARGS`` is a bad-input refusal: exit 2, one last ``Error:`` line holding
    ``words``, no traceback, and nothing under ``root`` written, changed or left behind."""
    before = _state(root)
    res = CliRunner().invoke(main, args)
    out = res.output
    assert res.exit_code == 2, out
    assert isinstance(res.exception, SystemExit), repr(res.exception)  # a click error
    assert "Traceback" not in out, out
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and out.rstrip().endswith(errors[0]), out  # one line, last
    assert words in errors[0], out
    assert _state(root) == before  # nothing written, changed or left behind
