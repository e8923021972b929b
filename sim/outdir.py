"""Output directories of the analysis commands: never mix two runs in one folder."""

from __future__ import annotations

import json
from pathlib import Path


class OutDirError(ValueError):
    """The output directory holds another run's files; the message names it."""


def owner_of(path: Path) -> str | None:
    """The command that wrote ``path/config.json`` (its ``command`` or ``kind`` field), or
    None when there is no such file or it names none."""
    cfg = path / "config.json"
    try:
        data = json.loads(cfg.read_text())
    except (OSError, ValueError):
        return None
    return (data.get("command") or data.get("kind")) if isinstance(data, dict) else None


def claim_out_dir(path: str | Path, command: str) -> Path:
    """Create ``path`` for the results of ``command``, or reuse it if it is empty or holds
    an earlier result of the same command (which the new one replaces).

    Raises: :class:`OutDirError` if ``path`` is a file, or a non-empty directory whose
    ``config.json`` was written by another command (or is missing), e.g. a real run's
    directory: nothing is written then.
    """
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise OutDirError(f"{p}: --out must be a directory, found a file")
    if p.is_dir() and any(p.iterdir()):
        owner = owner_of(p)
        if owner != command:
            what = (
                f"the results of `{owner}`"
                if owner
                else "other files (no config.json of this command)"
            )
            raise OutDirError(f"{p}: already holds {what}; choose another --out or remove it")
    p.mkdir(parents=True, exist_ok=True)
    return p
