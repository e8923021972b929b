"""Every option of every command has help text; ``rolloutlab --help`` lists the commands
from :data:`rolloutlab.cli.HELP` without importing them, and those lines match the
commands' own docstrings."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from rolloutlab.cli import COMMANDS, DEPRECATED, HELP, main


def _commands(cmd: click.Command, path: tuple[str, ...] = ()):
    ctx = click.Context(main)
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            yield from _commands(cmd.get_command(ctx, name), (*path, name))
    else:
        yield " ".join(path), cmd


ALL = list(_commands(main))


def test_every_command_is_reached():
    assert {p.split()[0] for p, _ in ALL} == set(COMMANDS) and len(ALL) > 20


@pytest.mark.parametrize("path,cmd", ALL, ids=[p for p, _ in ALL])
def test_every_option_has_help(path, cmd):
    missing = [
        p.opts[0]
        for p in cmd.params
        if isinstance(p, click.Option) and not (p.help or "").strip() and "--help" not in p.opts
    ]
    assert not missing, f"rolloutlab {path}: options without help: {missing}"


def test_the_static_help_lines_are_the_docstrings():
    ctx = click.Context(main)
    for name in COMMANDS:
        assert HELP[name] == main.get_command(ctx, name).help.split("\n")[0], name


def test_group_help_imports_no_command_module():
    code = (
        "import sys; from click.testing import CliRunner; from rolloutlab.cli import main; "
        "r = CliRunner().invoke(main, ['--help']); assert r.exit_code == 0, r.output; "
        "print(sorted(m for m in sys.modules if m.startswith(('rolloutlab.commands', 'polars', "
        "'torch', 'matplotlib'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_group_help_lists_every_command():
    res = CliRunner().invoke(main, ["--help"])
    assert res.exit_code == 0
    for name in COMMANDS:
        assert f"  {name} " in res.output


def test_a_deprecated_command_runs_its_replacement_with_a_note_on_stderr():
    runner = CliRunner()
    old = runner.invoke(main, ["validate", "run-spread", "--help"])
    new = runner.invoke(main, ["compare", "run-spread", "--help"])
    assert old.exit_code == new.exit_code == 0
    assert old.stdout == new.stdout.replace("compare run-spread", "validate run-spread")
    assert old.stderr.strip() == (
        "note: 'rolloutlab validate' is deprecated, use 'rolloutlab compare' "
        "(same subcommands and options)"
    )
    assert new.stderr == ""


def test_a_deprecated_command_is_not_listed():
    res = CliRunner().invoke(main, ["--help"])
    assert DEPRECATED and not any(f"  {old} " in res.output for old in DEPRECATED)


def test_sim_help_imports_neither_polars_nor_numpy():
    """``sim --help`` builds its options from light modules; the simulator is imported
    when the command runs (``python -X importtime``: polars 0.3 s, numpy 0.15 s)."""
    code = (
        "import sys; from click.testing import CliRunner; from rolloutlab.cli import main; "
        "r = CliRunner().invoke(main, ['sim', '--help']); assert r.exit_code == 0, r.output; "
        "print(sorted(m for m in ('polars', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_an_old_option_spelling_still_runs_with_one_note():
    """``--spec`` (``--speculative``'s old spelling) fills the same parameter, is hidden
    from ``--help``, and says so on stderr."""
    from rolloutlab.sim.engine.speculative import SPECULATIVE_SYNTAX

    from rolloutlab.commands.simulate.sim import SPECULATIVE

    assert SPECULATIVE == SPECULATIVE_SYNTAX
    runner = CliRunner()
    res = runner.invoke(main, ["sim", "--spec", "4", "--steps", "2", "--out", "unused"])
    assert res.exit_code == 2
    assert res.stderr.splitlines()[0] == "note: --spec is deprecated, use --speculative"
    assert "--speculative '4': expected K:ALPHA" in res.output
    assert "--spec " not in runner.invoke(main, ["sim", "--help"]).output
