"""The command line reads as one vocabulary: no command lists a retired spelling
(:data:`rolloutlab.commands.options.vocabulary.VOCABULARY`, printed in docs/cli.md), and
every retired spelling a command had still fills the same parameter, with one note."""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from rolloutlab.cli import main
from rolloutlab.commands.options.common import renamed_argument, renamed_option
from rolloutlab.commands.options.vocabulary import VOCABULARY, listed_options, retired_in

ROOT = Path(__file__).resolve().parents[1]
VERL_RUN = "tests/data/verl_tb/q3b_fsdp_base"
GROUPS_RUN = "tests/data/groups/real_sync"


def test_every_command_lists_only_the_vocabulary():
    assert retired_in(main) == []


def test_the_walk_reaches_every_subcommand_option():
    listed = set(listed_options(main))
    assert ("calibrate verl-tb", "--logged-workers") in listed
    assert ("compare horizon", "--held-out-by") in listed
    assert ("real stability", "--pipeline") in listed
    assert not any(spelling == "--controllers" for _, spelling in listed)


def test_an_injected_synonym_is_named():
    """The check can fail: a command that lists ``--controllers`` beside the tree's
    ``--controller``, and a compare subcommand that lists ``--split`` (retired there only)."""

    @click.group()
    def root():
        pass

    @root.command("sim")
    @click.option("--controllers")
    @click.option("--split")
    def sim(controllers, split):
        pass

    @root.group("compare")
    def compare():
        pass

    @compare.command("horizon")
    @click.option("--split")
    @renamed_option("--mode", "--pipeline", "split")
    def horizon(split):
        pass

    assert retired_in(root) == [
        "rolloutlab compare horizon: --split (use --held-out-by)",
        "rolloutlab sim: --controllers (use --controller)",
    ]


def _docs_table() -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    text = (ROOT / "docs" / "cli.md").read_text()
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith("`--"):
            spell = tuple(re.findall(r"`([^`]+)`", cells[1]))
            retired = tuple(
                f"{o}@{scope}" if scope else o
                for o, scope in re.findall(r"`([^`]+)`(?: \(([^)]+)\))?", cells[2])
            )
            rows.append((cells[0], spell, retired))
    return rows


def test_the_docs_table_is_the_vocabulary():
    assert _docs_table() == [(t.concept, t.options, t.retired) for t in VOCABULARY]


RENAMED = [
    ("sim", [], "--controllers", "--controller", "static:4,sagc"),
    ("sweep", [], "--controllers", "--controller", "static:4"),
    ("advise", [], "--controllers", "--controller", "static:4"),
    ("advise", [], "--batch", "--parallel-trials", "3"),
    ("advise", [], "--accelerators", "--rollout-gpus", "4"),
    ("advise", [], "--splits", "--split", "56:8,48:16"),
    ("stability", [], "--batch", "--prompts", "8"),
    ("calibrate verl-tb", [VERL_RUN], "--gen-workers", "--logged-workers", "2"),
    ("calibrate verl-tb", [VERL_RUN], "--replicates", "--draws", "1"),
    ("compare verl-tb", [VERL_RUN], "--gen-workers", "--logged-workers", "2"),
    ("real sync", [], "--capacity", "--max-num-seqs", "8"),
    ("real sync", [], "--max-response-tokens", "--max-response-length", "24"),
    ("real async", [], "--capacity", "--max-num-seqs", "8"),
    ("real stability", [], "--mode", "--pipeline", "bounded"),
    ("real stability", [], "--jobs", "--max-parallel", "3"),
    ("compare idle", ["--real", GROUPS_RUN], "--capacity", "--max-num-seqs", "8"),
    ("compare horizon", ["--real", GROUPS_RUN], "--split", "--held-out-by", "lr"),
    ("compare collapse", ["--real", GROUPS_RUN], "--split", "--held-out-by", "seed"),
    ("compare horizon", ["--real", GROUPS_RUN], "--held-out", "--held-out-value", "4"),
    ("compare collapse", ["--real", GROUPS_RUN], "--held-out", "--held-out-value", "4"),
    ("compare groups", [GROUPS_RUN], "--horizon", "--forecast-steps", "2"),
    ("compare learning-budget", [], "--group-sizes", "--group-size", "2,4"),
    ("real task-spread", [], "--G", "--group-size", "5"),
    ("advise", [], "--pipelines", "--pipeline", "sync,bounded:2"),
    ("tail-study", [], "--spec", "--speculative", "3:0.6"),
]


def _params(path: str, args: list[str]) -> dict:
    cmd: click.Command = main
    for name in path.split():
        assert isinstance(cmd, click.Group)
        sub = cmd.get_command(click.Context(cmd), name)
        assert sub is not None, path
        cmd = sub
    ctx = cmd.make_context(path, [*args, "--out", "unused"])
    return dict(ctx.params)


@pytest.mark.parametrize(
    "path,extra,old,new,value", RENAMED, ids=[f"{r[0]} {r[2]}" for r in RENAMED]
)
def test_a_retired_spelling_fills_the_same_parameter_with_one_note(
    path, extra, old, new, value, capsys
):
    default = _params(path, extra)
    capsys.readouterr()
    as_new = _params(path, [*extra, new, value])
    assert capsys.readouterr().err == ""
    as_old = _params(path, [*extra, old, value])
    assert capsys.readouterr().err == f"note: {old} is deprecated, use {new}\n"
    assert as_old == as_new != default


def test_the_options_advise_prints_back_are_its_own(capsys):
    """``advise`` prints the options it searches around a calibrated run: each one a
    spelling ``advise --help`` lists."""
    from rolloutlab.sim.scenario.scenario import load_scenario

    from rolloutlab.commands.grid.advise import around_calibrated_run

    around_calibrated_run(load_scenario("gsm8k"), set())
    printed = set(re.findall(r" (--[a-z-]+) ", capsys.readouterr().out))
    listed = {o for p, o in listed_options(main) if p == "advise"}
    assert printed and printed <= listed, printed - listed


BENCH_RENAMED = [
    ("vllm_overhead.py", "--capacity", "--max-num-seqs"),
    ("forecast_validation.py", "--horizon", "--forecast-steps"),
    ("smollm2_eval.py", "--controllers", "--controller"),
]


@pytest.mark.parametrize("script,old,new", BENCH_RENAMED)
def test_the_bench_scripts_list_only_the_vocabulary(script, old, new):
    text = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"{new} " in text and old not in text


def test_a_bench_scripts_retired_spelling_fills_the_same_argument_with_one_note(capsys):
    ap = argparse.ArgumentParser()
    new = ap.add_argument("--max-num-seqs", type=int, default=64)
    renamed_argument(ap, "--capacity", new)
    assert ap.parse_args(["--max-num-seqs", "8"]).max_num_seqs == 8
    assert capsys.readouterr().err == ""
    assert ap.parse_args(["--capacity", "8"]).max_num_seqs == 8  # the new one's type: int
    assert capsys.readouterr().err == "note: --capacity is deprecated, use --max-num-seqs\n"


def test_forecast_validation_reads_its_retired_horizon_as_forecast_steps(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location(
        "forecast_validation", ROOT / "bench" / "forecast_validation.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    with pytest.raises(SystemExit) as stop:
        bench.main(["--out", str(tmp_path / "out"), "--horizon", "0"])
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert "note: --horizon is deprecated, use --forecast-steps\n" in err
    assert "--forecast-steps 0: needs an integer >= 1" in err
