"""Lay the installed package out as folders, for tools that read source by import name.

setuptools installs the top-level folders ``sim/``, ``real/``, ``calibration/``,
``analysis/`` and ``testing/`` as ``rolloutlab.sim``, ``rolloutlab.real``, ... through
``[tool.setuptools] package-dir`` in pyproject.toml. mypy and import-linter find modules
by walking folders named like the import path, so they cannot see that mapping (nor the
editable install's import hook). This script writes ``OUT/rolloutlab/`` with symbolic
links to the real folders, derived from pyproject's ``packages`` and ``package-dir`` (the
one list of what is installed where), so both tools read the real files under their
import names.

Usage: ``python tools/link_tree.py [OUT] [--root ROOT]`` (OUT defaults to build/typecheck,
ROOT to the repository holding this script). The folder is rebuilt from scratch each time.
"""

from __future__ import annotations

import argparse
import shutil
import tomllib
from pathlib import Path

SKIP = {"__pycache__"}


def package_sources(root: Path) -> dict[str, Path]:
    """Import name -> source folder of every package pyproject installs, resolved the way
    setuptools resolves ``package-dir`` (the longest mapped prefix of the name wins; an
    unmapped name is its dotted path under the repository root)."""
    cfg = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = cfg.get("package-dir", {})
    out = {}
    for name in cfg["packages"]:
        parts = name.split(".")
        for cut in range(len(parts), -1, -1):
            prefix = ".".join(parts[:cut])
            if prefix in mapping or cut == 0:
                base = mapping.get(prefix, "")
                out[name] = root / base / Path(*parts[cut:])
                break
    return out


def write_link_tree(root: Path, out: Path) -> Path:
    """Rebuild ``out`` as the package tree pyproject installs: a package whose sub-packages
    all sit in its own folder is one link to that folder; one with a sub-package mapped
    elsewhere is a real folder holding links to its own files and to its sub-packages.
    Returns ``out``. Raises FileNotFoundError when a listed package's folder is missing."""
    sources = package_sources(root)
    for name, src in sources.items():
        if not src.is_dir():
            raise FileNotFoundError(f"pyproject.toml: package {name} maps to {src}, not a folder")
    if out.is_symlink() or out.is_file():
        out.unlink()
    elif out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    def inside_own_folder(name: str) -> bool:
        return all(
            src == sources[name] / Path(*sub[len(name) + 1 :].split("."))
            for sub, src in sources.items()
            if sub.startswith(name + ".")
        )

    def lay(name: str, dest: Path) -> None:
        src = sources[name]
        if inside_own_folder(name):
            dest.symlink_to(src.resolve(), target_is_directory=True)
            return
        dest.mkdir()
        children = {
            sub.rpartition(".")[2]
            for sub in sources
            if sub.rpartition(".")[0] == name and sub.count(".") == name.count(".") + 1
        }
        for entry in sorted(src.iterdir()):
            if entry.name not in children and entry.name not in SKIP:
                (dest / entry.name).symlink_to(entry.resolve())
        for child in sorted(children):
            lay(f"{name}.{child}", dest / child)

    for top in sorted(n for n in sources if "." not in n):
        lay(top, out / top)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=Path("build/typecheck"))
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args(argv)
    write_link_tree(args.root.resolve(), args.out)


if __name__ == "__main__":
    main()
