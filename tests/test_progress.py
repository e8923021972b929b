"""Progress when stderr is not a terminal: plain lines at each tenth
of the work with the elapsed time, no carriage returns; nothing when disabled."""

from __future__ import annotations

import io

from click.testing import CliRunner
from rolloutlab.sim.trace.progress import LineProgress, phase, progress_bar

from rolloutlab.cli import main


def test_one_line_per_tenth_and_the_last_one_says_done():
    out = io.StringIO()
    bar = LineProgress(total=20, desc="simulating", unit="step", stream=out)
    for _ in range(20):
        bar.update()
    bar.set_postfix(G=8)
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 10 and "\r" not in out.getvalue()
    assert lines[0].startswith("simulating: 2/20 step (10 %), elapsed ")
    assert lines[-1].startswith("simulating: done, 20/20 step (100 %), elapsed ")


def test_wrapping_an_iterable_resumed_and_without_a_total():
    out = io.StringIO()
    assert list(LineProgress(range(3, 10), total=10, initial=3, stream=out)) == list(range(3, 10))
    assert [x.split(" ")[0] for x in out.getvalue().splitlines()] == [
        "4/10", "5/10", "6/10", "7/10", "8/10", "9/10", "done,"
    ]  # fmt: skip
    out = io.StringIO()
    for _ in LineProgress(iter(range(25)), desc="d", stream=out):
        pass
    assert [x.split(" ")[1] for x in out.getvalue().splitlines()] == ["10", "20", "done,"]


def test_disabled_prints_nothing(capsys):
    for _ in progress_bar(range(50), desc="x", enabled=False):
        pass
    assert capsys.readouterr().err == ""


def test_a_piped_sim_prints_its_progress_lines(tmp_path):
    res = CliRunner().invoke(main, ["sim", "--steps", "5", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert "simulating: done, 20/20 step (100 %), elapsed " in res.output


def test_a_phase_without_a_count_says_when_it_starts_and_ends():
    out = io.StringIO()
    with phase("calibrate learning: fitting runs/x", stream=out):
        pass
    start, end = out.getvalue().splitlines()
    assert start == "calibrate learning: fitting runs/x ..."
    assert end.startswith("calibrate learning: fitting runs/x: done, elapsed ")


def test_a_run_that_ends_short_says_where_it_stopped_never_done():
    """84 of 100 counted: the last line says 'stopped at', not 'done'; a run that stops
    right after a printed line (5 of 9) still gets its closing line."""
    out = io.StringIO()
    bar = LineProgress(total=100, desc="sweep", unit="point", stream=out)
    bar.update(84)
    bar.close()
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("sweep: stopped at 84/100 point (84 %), elapsed ") and "done" not in last
    out = io.StringIO()
    bar = LineProgress(total=9, desc="validate", unit="step", stream=out)
    for _ in range(5):
        bar.update()  # a line at 5/9 (marks every ceil(9/10) = 1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[-2].startswith("validate: 5/9 step") and lines[-1].startswith(
        "validate: stopped at 5/9 step"
    )
