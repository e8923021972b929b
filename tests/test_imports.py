"""The package's import graph, read from the source with ``ast``: no cycle anywhere.
(The layers and forbidden imports: pyproject's import-linter contracts,
tests/test_import_contracts.py; private names imported across modules:
tests/test_cli_layout.py.)"""

from __future__ import annotations

import ast
import graphlib
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_dirs() -> dict[str, Path]:
    """Import name -> folder of every top package, from pyproject's package-dir."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = {name: ROOT / d for name, d in cfg.get("package-dir", {}).items()}
    dirs.setdefault("rolloutlab", ROOT / "rolloutlab")
    return dirs


def modules() -> dict[str, Path]:
    """Dotted name -> source file of every module under the rolloutlab namespace."""
    out = {}
    for pkg, folder in package_dirs().items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if pkg == "rolloutlab" and parts and parts[0] in {"sim", "real", "calibration"}:
                continue  # (a folder of that name inside rolloutlab/ would be shadowed)
            out[".".join([pkg, *parts])] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of ``known`` that module ``name`` (file ``path``) imports: every import
    statement (function-level ones included: they are cycles too, only deferred) except
    in ``if TYPE_CHECKING:`` blocks; relative imports resolved; ``from pkg import module``
    counts as importing the module."""
    tree = ast.parse(path.read_text(), str(path))
    skip = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and _is_type_checking(node)
        for n in ast.walk(node)
    }
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for a in node.names:
                sub = f"{base}.{a.name}"
                out |= {sub} if sub in known else ({base} if base in known else set())
    return out - {name}


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports, for every module of the package."""
    mods = modules()
    return {m: imports(m, path, set(mods)) for m, path in mods.items()}


def test_the_graph_sees_the_package():
    graph = import_graph()
    assert "rolloutlab.sim.engine.core" in graph and "rolloutlab.real.engines" in graph
    assert "rolloutlab.sim.engine.batch" in graph["rolloutlab.sim.engine.core"]
    assert "rolloutlab.sim.engine.worker" in graph["rolloutlab.sim.engine.paged_worker"]


def test_no_import_cycle():
    graph = import_graph()
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        raise AssertionError("import cycle: " + " -> ".join(exc.args[1])) from None


def sim_roles() -> list[str]:
    """The role sub-packages of sim, from the layers contract in pyproject.toml (import-linter
    checks that they point down and that every sim module sits in one)."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (sim,) = [c for c in contracts["contracts"] if c.get("containers") == ["rolloutlab.sim"]]
    return [role.strip() for layer in sim["layers"] for role in layer.split("|")]


def test_the_product_never_imports_the_reference_loops():
    bad = [
        f"{m} -> {d}"
        for m, path in modules().items()
        for d in _imported_names(path)
        if d.startswith("tests")
    ]
    assert not bad, "\n".join(bad)


def _imported_names(path: Path) -> set[str]:
    """Every module name an import statement of ``path`` names (absolute imports)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module)
    return out


def test_each_role_package_exports_its_interface():
    import importlib

    roles = sim_roles()
    assert "models" in roles and "studies" in roles
    for role in roles:
        package = importlib.import_module(f"rolloutlab.sim.{role}")
        assert package.__doc__ and package.__all__, role
        for name in package.__all__:
            value = getattr(package, name)
            assert getattr(value, "__module__", "").startswith(f"rolloutlab.sim.{role}") or not (
                callable(value)
            ), f"{role}.{name} comes from {value.__module__}"


def test_importing_one_module_does_not_import_its_siblings():
    import subprocess
    import sys

    code = (
        "import sys, rolloutlab.sim.models.cost, rolloutlab.sim.pipelines.spec;"
        "print(sorted(m for m in sys.modules if m.startswith('rolloutlab.sim.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(ast.literal_eval(out.stdout))
    assert "rolloutlab.sim.models.learning" not in loaded
    assert "rolloutlab.sim.pipelines.registry" not in loaded
    assert {"rolloutlab.sim.models.cost", "rolloutlab.sim.pipelines.spec"} <= loaded


ROLE_PACKAGES = {
    "real": {"engines", "policy", "tasks", "runners", "rundir", "integrations"},
    "calibration": {"readers", "fits", "validation", "scenarios"},
}


def test_real_and_calibration_modules_sit_in_role_packages():
    loose = [
        m
        for m in import_graph()
        for top, roles in ROLE_PACKAGES.items()
        if m.startswith(f"rolloutlab.{top}.") and m.split(".")[2] not in roles
    ]
    assert not loose, f"modules outside the role packages {ROLE_PACKAGES}: {sorted(loose)}"
