"""Reading a verl trainer config's YAML into flat dotted fields
(:mod:`rolloutlab.calibration.scenarios.verl_config` maps them to simulator settings)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


class VerlConfigError(ValueError):
    """A verl config that cannot be read or mapped; the message names the file and field."""


def _flatten(node: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(node, dict) and node:
        for k, v in node.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    else:
        out[prefix] = node


_REF = re.compile(r"\$\{(?:oc\.select:)?\s*([\w.]+)\s*(?:,\s*([^}]*))?\}")


def _resolve(flat: dict[str, Any], key: str, seen: tuple[str, ...] = ()) -> Any:
    """``flat[key]`` with a whole-value ``${a.b}`` / ``${oc.select:a.b, d}`` resolved
    (recursively); anything else (``oc.env``, arithmetic) is left as written."""
    value = flat.get(key)
    if not isinstance(value, str) or key in seen:
        return value
    m = _REF.fullmatch(value.strip())
    if m is None:
        return value
    ref, default = m.group(1), m.group(2)
    if ref in flat:
        return _resolve(flat, ref, (*seen, key))
    if default is not None:
        d = default.strip()
        return None if d in ("null", "None") else _scalar(d)
    return value


def _scalar(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def read_flat(path: str | Path) -> dict[str, Any]:
    """The leaf fields of the YAML file ``path`` as ``{dotted key: value}``, interpolations
    within the file resolved; hydra's ``defaults`` and ``hydra`` blocks dropped (they
    name other files). Raises :class:`VerlConfigError` naming the file (and line) when it
    is missing, not YAML, or not a mapping."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise VerlConfigError(f"{path}: no such file" if not p.exists() else f"{path}: not a file")
    try:
        doc = yaml.safe_load(p.read_text())
    except UnicodeDecodeError:
        raise VerlConfigError(f"{path}: not a text file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise VerlConfigError(
            f"{path}: {where}not valid YAML ({getattr(exc, 'problem', exc)})"
        ) from None
    if not isinstance(doc, dict):
        raise VerlConfigError(
            f"{path}: expected a YAML mapping of verl fields, got {type(doc).__name__}"
        )
    flat: dict[str, Any] = {}
    _flatten({k: v for k, v in doc.items() if k not in ("defaults", "hydra")}, "", flat)
    return {k: _resolve(flat, k) for k in flat}
