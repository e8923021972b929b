"""What gets written next to every result: the resolved configuration and versions.

The one way a run records its provenance: every command's ``config.json`` (through
:func:`write_config`) and a real run's (:mod:`real.rundir.folder`). Lives in ``sim/`` because
``real/`` may import only ``sim/`` (docs/DESIGN.md, "Packages").
"""

from __future__ import annotations

import dataclasses
import functools
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rolloutlab.sim.scenario.scenario import Scenario
from rolloutlab.sim.trace import strict_json

if TYPE_CHECKING:
    from rolloutlab.sim.models.rewards import RewardConfig
    from rolloutlab.sim.pipelines.dynamic_sampling import DynamicSampling

LIBRARIES = (
    "rolloutlab",
    "numpy",
    "scipy",
    "simpy",
    "polars",
    "pyarrow",
    "matplotlib",
    "seaborn",
    "click",
    "tensorboard",
    "torch",
    "vllm",
)


@functools.cache  # why: one git call per process, not one per config written
def source_commit() -> str | None:
    """The git commit of the rolloutlab source this process runs (12 hex digits, with
    ``+dirty`` when tracked files differ from it); None when the source is not the top of
    a git checkout (an installed wheel, even inside another repository) or without git."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():  # why: git -C would report an enclosing repository's commit
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+dirty" if dirty else head or None


def library_versions() -> dict[str, str | None]:
    """Installed version of each library in :data:`LIBRARIES` (None when absent), and
    ``commit``: the rolloutlab source's (:func:`source_commit`)."""
    out: dict[str, str | None] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "commit": source_commit(),
    }
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def write_config(path: str | Path, config: dict[str, Any]) -> None:
    """Write ``config`` plus ``"versions"`` (:func:`library_versions`) as indented JSON
    to ``path``, atomically, as strict JSON (non-finite numbers as ``null``, other values
    JSON cannot hold as ``str``; :mod:`sim.trace.strict_json`)."""
    payload = {**config, "versions": library_versions()}
    strict_json.write_json(path, payload, default=str)


def describe_rewards(
    rewards: RewardConfig | None, dynamic: DynamicSampling | None, target: float | None
) -> dict[str, Any]:
    """The reward settings for ``config.json``: ``rewards``, ``dynamic_sampling`` and
    ``target_reward`` (None where the run has none)."""
    return {
        "rewards": None if rewards is None else rewards.describe(),
        "dynamic_sampling": None if dynamic is None else vars(dynamic).copy(),
        "target_reward": target,
    }


def describe(obj: Any) -> Any:
    """A JSON-ready description of a model object (e.g. a length model): a dataclass
    becomes ``{"kind": class name, field: value}`` recursively; a numeric array or a long
    tuple/list of numbers becomes ``{"n", "min", "median", "max"}``; a list of arrays
    (observed groups) becomes ``{"groups": count}`` (why: ``repr`` of a 4,096-value table
    is neither readable nor complete)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            "kind": type(obj).__name__,
            **{f.name: describe(getattr(obj, f.name)) for f in dataclasses.fields(obj)},
        }
    if isinstance(obj, (tuple, list)) and obj and all(isinstance(x, np.ndarray) for x in obj):
        return {"groups": len(obj)}
    if isinstance(obj, np.ndarray) or (
        isinstance(obj, (tuple, list))
        and len(obj) > 8
        and all(isinstance(x, (int, float)) for x in obj)
    ):
        a = np.asarray(obj, dtype=np.float64)
        return (
            {
                "n": int(a.size),
                "min": float(a.min()),
                "median": float(np.median(a)),
                "max": float(a.max()),
            }
            if a.size
            else {"n": 0}
        )
    return obj


def scenario_source(sc: Scenario) -> dict:
    """What config.json keeps of a scenario's calibration file: its name, format,
    provenance and fit, not the raw tables (the length model is described apart)."""
    return {
        k: sc.source[k]
        for k in ("name", "format", "version", "provenance", "fit")
        if k in sc.source
    }
