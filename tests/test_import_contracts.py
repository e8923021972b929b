"""The import rules of docs/DESIGN.md, written once as import-linter contracts in
pyproject.toml (``make lint-imports``), read from the real imports through the link tree of
tools/link_tree.py: the tree maps every package where the install does; a copy of the
project keeps every contract; an upward import put into the copy breaks the contract it
should."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _run_link_tree(root: Path) -> Path:
    out = root / "build" / "typecheck"
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "link_tree.py"), str(out), "--root", str(root)],
        check=True,
    )
    return out


def test_the_link_tree_puts_every_package_where_the_install_does(tmp_path):
    """The editable install's own finder is the reference: each package pyproject lists
    resolves to the same folder through the tree."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    tree = tmp_path / "tree"
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "link_tree.py"), str(tree), "--root", str(ROOT)],
        check=True,
    )
    assert len(cfg["packages"]) > 20
    for name in cfg["packages"]:
        installed = importlib.util.find_spec(name)
        assert installed is not None and installed.origin, name
        linked = tree.joinpath(*name.split("."), "__init__.py")
        assert linked.resolve() == Path(installed.origin).resolve(), name


def _python_only(folder: str, names: list[str]) -> set[str]:
    """shutil.copytree's ignore: caches and every file but Python sources."""
    return {
        n
        for n in names
        if n == "__pycache__" or (Path(folder, n).is_file() and not n.endswith(".py"))
    }


@pytest.fixture(scope="module")
def project_copy(tmp_path_factory) -> Path:
    """The project's Python sources and pyproject.toml, copied (data files left out)."""
    dest = tmp_path_factory.mktemp("project")
    shutil.copy(ROOT / "pyproject.toml", dest)
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    tops = {"rolloutlab", *cfg["package-dir"].values()}
    for top in tops:
        shutil.copytree(ROOT / top, dest / top, ignore=_python_only)
    return dest


def _lint(root: Path) -> subprocess.CompletedProcess:
    tree = _run_link_tree(root)
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=tree,  # lint-imports puts its working folder first on sys.path
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "300"},
    )


def test_the_project_keeps_every_contract(project_copy):
    res = _lint(project_copy)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 broken" in res.stdout


# (file, the code appended to it, the contract that must break, the arrow it must name)
UPWARD = [
    pytest.param(
        "sim/models/cost.py",
        "def _upward():\n    import rolloutlab.analysis\n",
        "Top packages point down",
        "rolloutlab.sim.models.cost -> rolloutlab.analysis",
        id="sim-imports-analysis-in-a-function",
    ),
    pytest.param(
        "calibration/__init__.py",
        "import rolloutlab.real\n",
        "Top packages point down",
        "rolloutlab.calibration -> rolloutlab.real",
        id="calibration-imports-real",
    ),
    pytest.param(
        "sim/models/cost.py",
        "from rolloutlab.sim.studies import compare\n",
        "Inside sim, role packages point down",
        "rolloutlab.sim.models.cost -> rolloutlab.sim.studies.compare",
        id="models-import-studies",
    ),
    pytest.param(
        "sim/engine/batch.py",
        "from rolloutlab.sim.control import controllers\n",
        "Inside sim, role packages point down",
        "rolloutlab.sim.engine.batch -> rolloutlab.sim.control.controllers",
        id="engine-imports-control-beside-it",
    ),
    pytest.param(
        "sim/trace/schema.py",
        "import torch\n",
        "sim is the base",
        "rolloutlab.sim.trace.schema -> torch",
        id="sim-imports-torch",
    ),
]


@pytest.mark.parametrize("path, code, contract, arrow", UPWARD)
def test_an_upward_import_breaks_its_contract(project_copy, path, code, contract, arrow):
    target = project_copy / path
    original = target.read_text()
    target.write_text(original + "\n\n" + code)
    try:
        res = _lint(project_copy)
    finally:
        target.write_text(original)
    assert res.returncode == 1, res.stdout
    broken = [line for line in res.stdout.splitlines() if line.endswith(" BROKEN")]
    assert any(line.startswith(contract) for line in broken), broken
    assert arrow in res.stdout


def test_a_module_outside_the_sim_role_packages_breaks_the_sim_contract(project_copy):
    loose = project_copy / "sim" / "loose.py"
    loose.write_text("from rolloutlab.sim.models import cost\n")
    try:
        res = _lint(project_copy)
    finally:
        loose.unlink()
    assert res.returncode == 1, res.stdout
    assert "rolloutlab.sim.loose" in res.stdout


def test_a_type_checking_import_is_no_arrow(project_copy):
    target = project_copy / "sim" / "models" / "cost.py"
    original = target.read_text()
    target.write_text(
        original + "\n\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
        "    import rolloutlab.analysis\n"
    )
    try:
        res = _lint(project_copy)
    finally:
        target.write_text(original)
    assert res.returncode == 0, res.stdout
