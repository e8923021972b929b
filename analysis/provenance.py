"""What gets written next to every result: the resolved configuration and versions."""

from __future__ import annotations

import json
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

LIBRARIES = ("rolloutlab", "numpy", "scipy", "simpy", "polars", "pyarrow", "matplotlib",
             "seaborn", "click", "tensorboard", "torch", "vllm")


def library_versions() -> dict[str, str | None]:
    """Installed version of each library in :data:`LIBRARIES` (None when absent)."""
    out: dict[str, str | None] = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def write_config(path: str | Path, config: dict[str, Any]) -> None:
    """Write ``config`` plus ``library_versions`` as indented JSON to ``path``."""
    payload = {**config, "versions": library_versions()}
    Path(path).write_text(json.dumps(payload, indent=2, default=str) + "\n")
