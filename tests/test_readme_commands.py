"""The README's commands still run as written on a fresh clone, without running them.

Every ``rolloutlab ...`` command in a fenced code block of README.md (and ``make demo``'s)
is checked three ways:
its subcommand exists and click parses its options (``make_context``, which runs the
option types and callbacks but not the command); every output path it names (``--out``,
``-o``) lies under ``runs/`` (git-ignored), so nothing lands in the repository root; and
every repository file it names as input (``tests/data/...``, ``sim/data/...``,
``examples/...``) exists. A path under ``runs/`` that an earlier command of the README
writes is not required to exist. Every relative markdown link in README.md and
``docs/*.md`` must point to an existing file. Fast: nothing is simulated or trained.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from rolloutlab.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
OUTPUT_OPTIONS = ("--out", "-o")
# top-level folders of the repository whose paths a command reads (inputs that must exist)
INPUT_ROOTS = ("tests", "sim", "examples", "calibration", "real", "results", "bench", "docs")
_INPUT_PATH = re.compile(r"(?<![\w/.])((?:" + "|".join(INPUT_ROOTS) + r")/[\w./-]*\w)")
_ASSIGN = re.compile(r"^([A-Za-z_]\w*)=(\S*)$")
_VAR = re.compile(r"\$(\w+)|\$\{(\w+)\}")


def fenced_blocks(text: str) -> list[str]:
    """The bodies of the fenced code blocks (```) of a markdown text, in order."""
    blocks, body, inside = [], [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if inside:
                blocks.append("\n".join(body))
                body = []
            inside = not inside
        elif inside:
            body.append(line)
    return blocks


def shell_commands(block: str) -> list[str]:
    """The simple commands of a shell snippet: ``\\`` continuations joined, a leading
    ``$ `` prompt dropped, comments removed, split at ``&&`` and ``;``, and variables set
    by plain assignments (``F=tests/...``) substituted into the commands after them. A
    command that still holds a ``$`` (a loop variable, ``$R`` standing for a folder of the
    reader's own) is kept as it is; :func:`readme_commands` skips it."""
    env: dict[str, str] = {}
    out = []
    for line in block.replace("\\\n", "").splitlines():
        line = line.strip()
        if line.startswith("$ "):
            line = line[2:]
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:  # not shell: program output shown beside a command
            continue
        parts: list[list[str]] = [[]]
        for tok in tokens:
            if tok == "&&" or tok.endswith(";"):
                if tok.rstrip(";"):
                    parts[-1].append(tok.rstrip(";"))
                parts.append([])
            else:
                parts[-1].append(tok)
        for part in filter(None, parts):
            if len(part) == 1 and (m := _ASSIGN.match(part[0])):
                env[m.group(1)] = _substitute(m.group(2), env)
                continue
            out.append(shlex.join(_substitute(t, env) for t in part))
    return out


def _substitute(token: str, env: dict[str, str]) -> str:
    return _VAR.sub(lambda m: env.get(m.group(1) or m.group(2), m.group(0)), token)


def readme_commands() -> tuple[list[list[str]], list[str]]:
    """(the README's ``rolloutlab`` commands as argument lists, without ``rolloutlab``;
    the commands skipped because a ``$`` is left after substitution). A shell loop's body
    (``for c in ...; do rolloutlab ... $c``) has no value to substitute, so it is skipped,
    and so is ``$R``, the reader's own log folder: neither can be parsed as written."""
    found, skipped = [], []
    for block in fenced_blocks(README.read_text()):
        for cmd in shell_commands(block):
            args = shlex.split(cmd)
            while args and args[0] in ("do", "then"):
                args = args[1:]
            if not args or Path(args[0]).name != "rolloutlab":
                continue
            if any("$" in a for a in args):
                skipped.append(cmd)
            else:
                found.append(args[1:])
    return found, skipped


def makefile_commands() -> list[list[str]]:
    """The ``rolloutlab`` commands of the Makefile (``make demo``'s, which the README
    quotes), as argument lists without ``rolloutlab``."""
    found = []
    for line in (ROOT / "Makefile").read_text().splitlines():
        args = shlex.split(line.strip()) if "$(BIN)/rolloutlab " in line else []
        if args and args[0] == "$(BIN)/rolloutlab":
            found.append(args[1:])
    return found


COMMANDS, SKIPPED = readme_commands()
COMMANDS += makefile_commands()


def _name(args: list[str]) -> str:
    return "rolloutlab " + " ".join(args)


def test_the_readme_has_commands():
    assert len(COMMANDS) >= 10, COMMANDS
    assert len(SKIPPED) <= len(COMMANDS) // 2, SKIPPED


def _parse(args: list[str]) -> click.Context:
    """Resolve ``args``' subcommand through the groups and let click parse the rest."""
    parent = click.Context(main, info_name="rolloutlab")
    cmd: click.Command = main
    name = "rolloutlab"
    while isinstance(cmd, click.Group):
        if not args or args[0].startswith("-"):
            raise click.UsageError(f"{name}: no subcommand")
        sub = cmd.get_command(parent, args[0])
        if sub is None:
            raise click.UsageError(f"{name}: no command {args[0]!r}")
        if cmd is not main:
            parent = click.Context(cmd, info_name=name, parent=parent)
        cmd, name, args = sub, args[0], args[1:]
    return cmd.make_context(name, list(args), parent=parent, resilient_parsing=False)


@pytest.fixture
def earlier_outputs_exist(monkeypatch):
    """Treat paths under ``runs/`` as existing: the README writes them in an earlier
    command (``real sync --out runs/x`` then ``compare idle --real runs/x``)."""
    convert = click.Path.convert

    def lenient(self, value, param, ctx):
        if str(value).startswith("runs/"):
            return self.coerce_path_result(value)
        return convert(self, value, param, ctx)

    monkeypatch.setattr(click.Path, "convert", lenient)


@pytest.mark.parametrize("args", COMMANDS, ids=[_name(a)[:80] for a in COMMANDS])
def test_command_parses(args, earlier_outputs_exist, monkeypatch):
    monkeypatch.chdir(ROOT)
    try:
        _parse(args)
    except click.UsageError as exc:
        pytest.fail(f"{_name(args)}: {exc.format_message()}")


def _outputs(args: list[str]) -> list[str]:
    outs = []
    for i, a in enumerate(args):
        if a in OUTPUT_OPTIONS and i + 1 < len(args):
            outs.append(args[i + 1])
        elif a.startswith("--out="):
            outs.append(a.split("=", 1)[1])
    return outs


@pytest.mark.parametrize("args", COMMANDS, ids=[_name(a)[:80] for a in COMMANDS])
def test_outputs_under_runs(args):
    outs = _outputs(args)
    bad = [o for o in outs if not o.startswith("runs/")]
    assert not bad, f"{_name(args)} writes outside runs/: {bad}"


@pytest.mark.parametrize("args", COMMANDS, ids=[_name(a)[:80] for a in COMMANDS])
def test_input_paths_exist(args):
    named = [m for a in args for m in _INPUT_PATH.findall(a)]
    missing = [p for p in named if not (ROOT / p).exists()]
    assert not missing, f"{_name(args)} names missing files: {missing}"


def markdown_links(path: Path) -> list[str]:
    """The relative targets of the markdown links and images of ``path`` outside code
    blocks and spans, without ``#fragment``."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    return [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:|#", t) and t.split("#")[0]]


PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_relative_links_resolve(page):
    missing = [t for t in markdown_links(page) if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)}: links to missing files {missing}"


def test_readme_backticked_paths_exist():
    text = README.read_text()
    named = set(re.findall(r"`((?:docs|bench|tests|examples)/[\w./-]+\.\w+)`", text))
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"README.md names missing files: {missing}"
