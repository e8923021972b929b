"""Write a calibration JSON (the format of :mod:`sim.scenario.scenario`) with provenance.

Every file is checked by :func:`sim.scenario.scenario.scenario_from_dict` before it is written,
and written atomically (a temporary file in the same folder, then ``os.replace``), so
a failed run never leaves a half-written calibration behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from rolloutlab.sim.scenario.scenario import FORMAT, VERSION, scenario_from_dict
from rolloutlab.sim.trace import strict_json


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def source_entry(path: str | Path, label: str | None = None) -> dict[str, str]:
    """``{"path", "sha256"}`` of a source file, the path as given (or ``label``)."""
    return {"path": label or str(path), "sha256": sha256_file(path)}


def rolloutlab_version() -> str:
    """The installed rolloutlab version ("unknown" when not installed)."""
    try:
        return metadata.version("rolloutlab")
    except metadata.PackageNotFoundError:
        return "unknown"


def calibration_dict(
    name: str,
    lengths: dict,
    prompt_tokens: int,
    cost: dict,
    engine: dict,
    defaults: dict,
    provenance: dict,
    fit: dict,
    step_phases: dict | None = None,
) -> dict[str, Any]:
    """Assemble a calibration dict (format ``rolloutlab.calibration``, current version);
    ``provenance`` gains ``rolloutlab_version``; ``step_phases`` (a
    :meth:`sim.models.step_phases.StepPhases.to_dict` block) is written when given. Raises :class:`sim.scenario.scenario.CalibrationError`
    if ``sim`` could not load it."""
    d = {
        "format": FORMAT,
        "version": VERSION,
        "name": name,
        "lengths": lengths,
        "prompt_tokens": int(prompt_tokens),
        "cost": cost,
        "engine": engine,
        "defaults": defaults,
        "provenance": {**provenance, "rolloutlab_version": rolloutlab_version()},
        "fit": fit,
    }
    if step_phases is not None:
        d["step_phases"] = step_phases
    scenario_from_dict(d, f"<calibration {name!r}>")
    return d


class OutputError(ValueError):
    """An output path that cannot be written; the message names it."""


def check_replaceable(out: str | Path) -> Path:
    """Check, before any work, that a calibration may be written to ``out``: ``out`` is
    new or already a calibration JSON (``"format": "rolloutlab.calibration"``, which the new
    one replaces), and its folder exists and is writable or can be created.

    Raises OutputError naming ``out``: a folder, a file that is not a calibration JSON (a
    command never overwrites a file it did not write), or an unwritable folder."""
    out = Path(out)
    if out.is_dir():
        raise OutputError(f"{out}: is a folder; --out takes a calibration JSON file name")
    if out.exists():
        try:
            d = json.loads(out.read_text())
        except (OSError, UnicodeDecodeError, ValueError):
            d = None
        if not (isinstance(d, dict) and d.get("format") == FORMAT):
            raise OutputError(
                f"{out}: exists and is not a calibration JSON; refusing to overwrite it "
                "(choose another --out or remove it)"
            )
    top = out.absolute().parent
    while not top.exists():
        top = top.parent
    if not top.is_dir() or not os.access(top, os.W_OK | os.X_OK):
        raise OutputError(f"{out}: cannot write the output ({top} is not a writable folder)")
    return out


def write_json_atomic(obj: Any, out: str | Path) -> Path:
    """Write ``obj`` as indented JSON to ``out`` atomically; create parent folders.

    Raises OutputError (a ValueError naming ``out``) when the folder cannot be made or
    written (a parent that is a file, no permission), before anything is written."""
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    except OSError as exc:
        raise OutputError(f"{out}: cannot write the output ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(strict_json.dumps(obj, indent=1))
            f.write("\n")
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a calibration is meant to be shared
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
