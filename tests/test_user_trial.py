"""What a new user's trial found that needs a run first, not a static
bad file (those are in tests/bad_input_cases.py): an interrupted grid rerun without
``--resume``, a user controller's exception, a controller without ``candidates``,
duplicated prompt ids, upper bounds on sizes, and a collapsed real run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
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


def test_a_finished_grid_is_never_replaced_by_a_rerun(tmp_path):
    """A rerun without --resume over a finished grid is refused (an interrupted rerun
    used to leave fewer rows than the finished grid had); --resume reruns nothing."""
    out = tmp_path / "g"
    runner = CliRunner()
    assert runner.invoke(main, [*STABILITY, "--out", str(out)]).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    for extra in ([], ["--steps", "6"]):  # the same grid, and another grid
        res = runner.invoke(main, [*STABILITY, *extra, "--out", str(out)])
        assert res.exit_code == 2, res.output
        assert "holds a finished grid of 3 points" in _one_error_line(res.output)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    res = runner.invoke(main, [*STABILITY, "--out", str(out), "--resume"])
    assert res.exit_code == 0, res.output
    assert (out / "grid.jsonl").read_bytes() == before["grid.jsonl"]


def write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path``; returns ``path``."""
    path.write_text(text)
    return path


BOOM = """
class Boom:
    def __init__(self):
        self.n = 0

    def propose(self):
        return 4

    def observe(self, lengths):
        self.n += 1
        if self.n > 1:
            {}["missing"]

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, state):
        self.n = state["n"]
"""
"""A user's controller without ``candidates`` whose observe() raises a KeyError on line 12."""


def test_a_user_controller_without_candidates_runs_in_sim(tmp_path):
    ctl = write(tmp_path / "quiet.py", BOOM.replace('{}["missing"]', "pass"))
    res = CliRunner().invoke(
        main, ["sim", "--controller", f"{ctl}:Boom", "--steps", "3", "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["check-controller", f"{ctl}:Boom"])  # the kit needs them
    assert res.exit_code == 2 and "needs a 'candidates' attribute" in _one_error_line(res.output)


def test_a_user_controller_exception_names_its_file_and_line(tmp_path):
    ctl = write(tmp_path / "boom.py", BOOM)
    out = tmp_path / "o"
    res = CliRunner().invoke(
        main, ["sim", "--controller", f"{ctl}:Boom", "--steps", "3", "--out", str(out)]
    )
    assert res.exit_code == 1, res.output  # the run failed; its input was fine
    line = _one_error_line(res.output)
    assert "observe() raised KeyError: 'missing'" in line
    assert f"at {ctl}, line 12, in observe" in line
    assert not out.exists()  # a failed run leaves nothing behind


def test_a_collapsed_sync_run_is_flagged_in_its_summary_and_on_the_console(tmp_path, capsys):
    from rolloutlab.real.runners.collapse import outcome, replay
    from rolloutlab.sim.trace import strict_json

    from rolloutlab.commands.real.run_options import collapse_summary, warn_collapse

    # the step table of `real sync --lr 1e6 --steps 12` (default task): reward 0.383 before
    # the first update, 0 after it, no informative group left (no KL, no gradient)
    steps = [{"step": 0, "reward_mean": 0.3828125, "kl": 0.0, "grad_norm": 0.28}]
    steps += [{"step": t, "reward_mean": 0.0, "kl": None, "grad_norm": None} for t in range(1, 12)]
    judged = replay(steps)
    assert (judged.collapsed, judged.t_collapse, judged.failure) == (True, 7, "reward")
    strict_json.write_json(tmp_path / "collapse.json", outcome(judged, lr=1e6, seed=0))
    summary = {**collapse_summary(tmp_path), "heldout_accuracy_end": 0.0}
    assert summary["collapsed"] is True and summary["failure"] == "reward"
    warn_collapse(summary)
    err = capsys.readouterr().err
    assert err.startswith("warning: the run collapsed at learner step 7 (reward criterion")
    assert "held-out accuracy at the end 0" in err
    warn_collapse({"collapsed": False})
    assert capsys.readouterr().err == ""


def test_a_sync_run_writes_its_collapse_verdict(tmp_path):
    pytest.importorskip("torch")
    from rolloutlab.real.runners.sync import run_sync

    from tests.real_helpers import tiny_config

    run_sync(tiny_config(steps=2), tmp_path / "run", progress=False)
    doc = json.loads((tmp_path / "run" / "collapse.json").read_text())
    assert doc["collapsed"] is False and doc["failure"] == "none" and doc["t_collapse"] is None


def test_a_study_folder_named_after_a_spec_gives_an_html_name_without_colons(tmp_path):
    study = tmp_path / "cmp_sagc:tau=1.6,delta=0.2"
    study.mkdir()
    write(study / "summary.csv", "controller,wall_clock_s\nsagc:tau=1.6,1.0\n")
    res = CliRunner().invoke(main, ["report", str(study), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "o").iterdir() if p.suffix == ".html") == [
        "cmp_sagc_tau=1.6_delta=0.2.html"
    ]


def test_console_tables_print_controller_specs_in_full(tmp_path):
    long = "sagc:tau=1.6,delta=0.2,forget=to_prior,candidates=4/8/16/32"
    args = ["sweep", "--controller", f"static:4,{long}", "--steps", "2", "--seeds", "1"]
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert long in res.output  # one cell: not cut, not wrapped onto two lines


def test_a_verl_tb_scenario_says_it_has_no_pass_rates_and_sim_says_so_too(tmp_path):
    run = Path(__file__).parent / "data" / "verl_tb" / "q3b_fsdp_base"
    cal = tmp_path / "verl.json"
    res = CliRunner().invoke(main, ["calibrate", "verl-tb", str(run), "--out", str(cal)])
    assert res.exit_code == 0, res.output
    assert (
        f"add them with `rolloutlab calibrate learning --verl-tb {run} --out {cal}`" in res.output
    )
    res = CliRunner().invoke(
        main, ["sim", "--calibration", str(cal), "--steps", "2", "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 0, res.output
    assert "no rewards: scenario verl has no pass rates, so no reward and no time to target" in (
        res.output
    )
