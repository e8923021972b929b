"""The run directory of a real run: who owns it, and what a resumed run must agree with.

A fresh run refuses a directory that already holds a run (``config.json`` or a trace)
and changes nothing there. A resumed run reads the stored ``config.json`` and refuses a
directory whose trace carries another ``run_id``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rolloutlab.real.rundir.config import SyncConfig, read_renamed_keys
from rolloutlab.sim.scenario import provenance
from rolloutlab.sim.trace import strict_json

TRACE_FILES = ("rollouts.jsonl", "steps.jsonl", "rollouts.parquet", "steps.parquet")
CONFIG_FILE = "config.json"
EXTENDABLE = ("steps", "sync.steps")
"""Settings ``--resume`` may change (extend a run; ``sync.steps`` is an asynchronous run's)."""


class RunDirError(ValueError):
    """The output directory cannot be used as asked; nothing in it was changed (a usage
    error: exit code 2 from the command line)."""


def _trace_run_ids(out: Path) -> set[str]:
    ids = set()
    for name in ("rollouts.jsonl", "steps.jsonl"):
        path = out / name
        if path.exists():
            with open(path) as fh:
                for line in fh:
                    try:
                        ids.add(json.loads(line)["run_id"])
                    except (ValueError, KeyError, TypeError):
                        continue  # a torn last line is handled by truncate_jsonl
                    break
    return ids


def create(out: Path, cfg: SyncConfig, kind: str = "real-sync") -> str:
    """Claim ``out`` for a new run: write ``config.json``; returns the new run id.

    Raises: RunDirError if ``out`` already holds a run's config or trace.
    """
    out = Path(out)
    held = [n for n in (CONFIG_FILE, *TRACE_FILES) if (out / n).exists()]
    if held:
        raise RunDirError(
            f"{out}: already holds a run ({', '.join(held)}); pass --resume to continue "
            "it or choose another --out (nothing was changed)"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"{out}: cannot create the run directory ({exc.strerror})") from None
    run_id = f"{kind}-{uuid.uuid4().hex[:8]}"
    write_config(out, run_id, cfg, kind)
    return run_id


def _stored_resumes(out: Path) -> list:
    try:
        doc = json.loads((Path(out) / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return []
    resumes = doc.get("resumes") if isinstance(doc, dict) else None
    return resumes if isinstance(resumes, list) else []


def write_config(out: Path, run_id: str, cfg: SyncConfig, kind: str = "real-sync") -> None:
    """Write the resolved config (any config with ``to_dict``: :class:`SyncConfig`, or
    ``real.rundir.async_config.AsyncConfig`` with ``kind="real-async"``) with library versions
    (:func:`sim.scenario.provenance.write_config`) to ``out/config.json``, keeping the ``resumes``
    record of an existing one."""
    doc = {"run_id": run_id, "kind": kind, "config": cfg.to_dict()}
    resumes = _stored_resumes(out)
    if resumes:
        doc["resumes"] = resumes
    provenance.write_config(Path(out) / CONFIG_FILE, doc)


def record_resume(out: Path, entry: dict[str, Any]) -> None:
    """Append ``entry`` (what a ``--resume`` runs: ``from_step``, ``to_step``, ``repaired``
    steps) to the ``resumes`` list of ``out/config.json``."""
    path = Path(out) / CONFIG_FILE
    doc = json.loads(path.read_text())
    doc["resumes"] = [*_stored_resumes(out), entry]
    doc.pop("versions", None)
    provenance.write_config(path, doc)


def _lookup(d: dict[str, Any], dotted: str) -> Any:
    value: Any = d
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _store(d: dict[str, Any], dotted: str, value: Any) -> None:
    *heads, last = dotted.split(".")
    for part in heads:
        d = d[part]
    d[last] = value


def open_existing(
    out: Path,
    overrides: dict[str, Any],
    kind: str = "real-sync",
    config_cls: Any = SyncConfig,
    check: Callable[[Any], object] | None = None,
) -> tuple[str, Any]:
    """Read the stored run of ``out`` for ``--resume``; returns ``(run_id, config)``.

    ``overrides``: settings given explicitly on the command line (dotted for nested ones,
    e.g. ``learner.lr``); ``steps`` may change
    (extend a run), any other that differs from the stored value is refused.
    ``kind`` / ``config_cls``: what the stored run must be and how its config is read.
    ``check(config)``: called before anything is written (the resume integrity check,
    :func:`real.rundir.resume_check.resume_point`); its RunDirError leaves the directory as it was.
    Raises: RunDirError with no run to resume, a trace of another run, or a conflicting
    setting; ConfigError for a stored config that is not valid.
    """
    out = Path(out)
    path = out / CONFIG_FILE
    if not path.exists():
        what = (
            "a trace but no config.json (not a rolloutlab real sync run)"
            if any((out / n).exists() for n in TRACE_FILES)
            else "no run"
        )
        raise RunDirError(f"{out}: holds {what}; nothing to resume (nothing was changed)")
    try:
        doc = strict_json.loads(path.read_text())
        writer = doc.get("command") if isinstance(doc, dict) and "config" not in doc else None
        if not writer:
            run_id, stored = doc["run_id"], doc["config"]
            if doc.get("kind") != kind:
                raise KeyError("kind")
    except (ValueError, KeyError, TypeError) as exc:
        raise RunDirError(f"{path}: not a rolloutlab {kind} config ({exc!r})") from None
    if writer:
        raise RunDirError(
            f"{path}: written by `rolloutlab {writer}` (a simulator output), not by a "
            f"rolloutlab {kind} run; nothing to resume (nothing was changed)"
        )
    others = _trace_run_ids(out) - {run_id}
    if others:
        raise RunDirError(
            f"{out}: its trace belongs to run(s) {sorted(others)}, its config.json to "
            f"{run_id!r}; refusing to mix runs (nothing was changed)"
        )
    stored = read_renamed_keys(stored, str(path))
    for key, value in overrides.items():
        old = _lookup(stored, key)
        if key not in EXTENDABLE and old != value:
            raise RunDirError(
                f"{path}: --resume with {key}={value!r}, but the run was made with {key}={old!r}"
            )
    for key, value in overrides.items():
        if key in EXTENDABLE:
            _store(stored, key, value)
    try:
        cfg = config_cls.from_dict(stored)
    except (TypeError, ValueError) as exc:
        raise RunDirError(f"{path}: its config cannot be used ({exc})") from None
    if check is not None:
        check(cfg)
    write_config(out, run_id, cfg, kind)
    return run_id, cfg


def claim(
    out: Path,
    cfg: Any,
    resume: bool,
    overrides: dict[str, Any] | None,
    check: Callable[[Any], object],
    kind: str = "real-sync",
    config_cls: Any = SyncConfig,
) -> tuple[str, Any]:
    """The run directory of a real run, written once for every runner: with ``resume``
    the stored run (:func:`open_existing`: ``overrides`` checked against it, ``check`` run
    on its config), else a new one (:func:`create` with ``cfg``). Returns ``(run_id,
    config)``, the config the run goes on with. Raises as those two do.
    """
    if resume:
        return open_existing(out, overrides or {}, kind=kind, config_cls=config_cls, check=check)
    return create(out, cfg, kind=kind), cfg
