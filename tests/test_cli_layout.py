"""The CLI in one place: every command listed, no torch for help,
no private name imported across modules (cycles: tests/test_imports.py; the import rules:
pyproject's import-linter contracts, tests/test_import_contracts.py)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMANDS = {
    "sim": [],
    "sweep": [],
    "stability": [],
    "calibrate": [
        "verl-tb",
        "servegen",
        "vllm-grid",
        "vllm-steps",
        "vllm-compare",
        "groups",
        "run-cost",
    ],
    "real": ["sync", "async", "stability", "task-lengths", "task-spread", "progress"],
    "compare": [
        "idle",
        "collapse",
        "learning",
        "scheduler",
        "verl-tb",
        "groups",
        "run-spread",
        "replay",
    ],
    "report": [],
    "check-controller": [],
    "advise": [],
    "tail-study": [],
    "scenario": ["from-verl"],
}

HELP_SCRIPT = """
import json, sys
from rolloutlab.cli import main
out = {}
for args in json.loads(sys.argv[1]):
    try:
        main(args + ["--help"], standalone_mode=False)
    except SystemExit:
        pass
out = {m: m in sys.modules for m in ("torch", "vllm", "seaborn")}
print(json.dumps(out))
"""


def _help_run(args_list: list[list[str]]) -> tuple[str, dict]:
    proc = subprocess.run(
        [sys.executable, "-c", HELP_SCRIPT, json.dumps(args_list)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    *text, last = proc.stdout.rstrip().splitlines()
    return "\n".join(text), json.loads(last)


def test_top_level_help_lists_every_command_and_imports_no_torch():
    text, loaded = _help_run([[]])
    listed = {
        line.split()[0]
        for line in text.split("Commands:")[1].splitlines()
        if line.startswith("  ") and line.split()
    }
    assert listed == set(COMMANDS)
    assert loaded == {"torch": False, "vllm": False, "seaborn": False}


def test_every_group_help_lists_its_subcommands_and_imports_no_torch():
    groups = [name for name, subs in COMMANDS.items() if subs]
    text, loaded = _help_run([[g] for g in groups])
    for g in groups:
        for sub in COMMANDS[g]:
            assert f"\n  {sub} " in text, (g, sub)
    assert not loaded["torch"] and not loaded["vllm"]


def test_the_simulator_commands_help_imports_no_plotting():
    """Figures import seaborn (seconds) when they are drawn, not for ``--help``."""
    _, loaded = _help_run(
        [["sim"], ["sweep"], ["stability"], ["advise"], ["scenario", "from-verl"]]
    )
    assert loaded == {"torch": False, "vllm": False, "seaborn": False}


def test_no_private_name_is_imported_from_another_module():
    bad = []
    for folder in ("sim", "real", "calibration", "analysis", "rolloutlab", "tests", "bench"):
        for p in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(p.read_text(), str(p))):
                if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                    bad += [
                        f"{p.relative_to(ROOT)}: {node.module}.{a.name}"
                        for a in node.names
                        if a.name.startswith("_")
                    ]
    assert bad == []
