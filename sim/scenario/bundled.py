"""The scenarios shipped in ``sim/data`` and the one a command runs when told none.

Importing this module imports no numpy, so a command's ``--help`` can list them."""

from __future__ import annotations

from importlib import resources

DEFAULT_SCENARIO = "longcot"
"""The scenario of ``rolloutlab sim`` and ``sweep`` without ``--scenario``."""


def bundled_scenarios() -> list[str]:
    """Names of the scenarios shipped in ``sim/data`` (sorted; empty where the data
    folder is missing)."""
    folder = resources.files("rolloutlab.sim").joinpath("data")
    if not folder.is_dir():
        return []
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))
