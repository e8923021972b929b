"""Controllers from outside the package: a user file, an importable module, or an
installed package's entry point.

Spec forms (anywhere a controller is named: ``sim``, ``sweep``, ``real sync``,
``real async``, ``check-controller``):

- ``path/to/file.py:ClassName[:key=value,...]``: the class ``ClassName`` of that file
  (loaded once per resolved path, under a private module name);
- ``package.module:ClassName[:key=value,...]``: imported with :mod:`importlib`;
- ``name[:key=value,...]``: an entry point ``name`` of the group
  :data:`ENTRY_POINT_GROUP` (``[project.entry-points."rolloutlab.controllers"]`` in the
  installing package's pyproject.toml), via :func:`importlib.metadata.entry_points`.

The options go through :func:`sim.control.options.constructor_kwargs` (checked
against the constructor's signature); ``seed`` is passed when the constructor takes it.
The class must meet :mod:`sim.control.contract` (:data:`~sim.control.contract.REQUIRED_METHODS`
and a fresh state that ``json.dumps`` writes without NaN); a ``candidates`` attribute (the
positive ints it may propose) is checked where given and required only by
``check-controller``. Every failure is one ValueError naming the spec, the file or module,
the class and what is wrong.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any

from rolloutlab.sim.control.contract import REQUIRED_METHODS, check_candidates, missing_methods
from rolloutlab.sim.control.options import constructor_kwargs

ENTRY_POINT_GROUP = "rolloutlab.controllers"
"""Entry-point group through which an installed package registers controllers by name."""

_FILE = re.compile(r"^(?P<src>.+?\.py):(?P<cls>[A-Za-z_]\w*)(?::(?P<args>.*))?$")
_MODULE = re.compile(r"^(?P<src>[A-Za-z_][\w.]*):(?P<cls>[A-Za-z_]\w*)(?::(?P<args>.*))?$")
_loaded: dict[Path, Any] = {}  # resolved file -> its module (one load per file)


def one_line(exc: BaseException) -> str:
    """``"TypeName: message"`` on one line (whitespace runs collapsed)."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())


@functools.cache
def entry_point_names() -> dict[str, Any]:
    """Installed entry points of :data:`ENTRY_POINT_GROUP`, by name (read once per
    process: scanning every installed distribution takes tens of milliseconds;
    ``entry_point_names.cache_clear()`` after installing one at run time)."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _load_file(path_text: str) -> Any:
    """Execute ``path_text`` as a module once (by resolved path); ValueError if it cannot."""
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise ValueError(f"file {path_text} not found")
    key = path.resolve()
    if key not in _loaded:
        digest = hashlib.sha1(str(key).encode()).hexdigest()[:12]
        stem = re.sub(r"\W", "_", key.stem)
        name = f"rolloutlab_user_{digest}_{stem}"
        mod_spec = importlib.util.spec_from_file_location(name, key)
        if mod_spec is None or mod_spec.loader is None:
            raise ValueError(f"cannot load {path_text} as Python")
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[name] = module  # dataclasses and pickling look classes up here
        try:
            mod_spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[name]
            raise ValueError(f"cannot load {path_text}: {one_line(exc)}") from None
        _loaded[key] = module
    return _loaded[key]


def _import(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except Exception as exc:
        raise ValueError(f"cannot import module {module!r} ({one_line(exc)})") from None


def resolve(spec: str) -> tuple[Any, str, str]:
    """``(factory, where, args)`` of an external spec: the class (or entry point's
    callable), a description naming the file/module/entry point and the class, and the
    ``k=v,...`` text. Raises ValueError (without the spec: the caller adds it)."""
    name, _, rest = spec.partition(":")
    m = _FILE.match(spec)
    entry = {} if m else entry_point_names()
    if m:
        module, where = _load_file(m["src"]), f"{m['src']}"
    elif name in entry:
        try:
            factory = entry[name].load()
        except Exception as exc:
            raise ValueError(
                f"entry point {name!r} ({entry[name].value}) cannot load: {one_line(exc)}"
            ) from None
        return factory, f"entry point {name!r} ({entry[name].value})", rest
    elif (m := _MODULE.match(spec)) is not None:
        module, where = _import(m["src"]), f"module {m['src']}"
    else:
        raise ValueError(
            "expected static:G, sagc[:k=v,...], lagc[:k=v,...], path/to/file.py:Class[:k=v,...], "
            "package.module:Class[:k=v,...] or an installed 'rolloutlab.controllers' entry point"
            + (f" ({', '.join(sorted(entry))})" if entry else "")
        )
    factory = getattr(module, m["cls"], None)
    if factory is None:
        raise ValueError(f"{where} has no class {m['cls']!r}")
    if not inspect.isclass(factory):
        raise ValueError(f"{where}:{m['cls']} is not a class")
    return factory, f"class {m['cls']} ({where})", m["args"] or ""


@functools.lru_cache(maxsize=256)
def _prepared(spec: str) -> tuple[Any, str, tuple[tuple[str, Any], ...], frozenset[str]]:
    """``(factory, where, keyword arguments, parameter names)`` of an external spec, checked
    once per spec (a kit check builds the same spec thousands of times; a failure is
    raised, not cached). Raises ValueError without the spec."""
    factory, where, args = resolve(spec)
    if inspect.isclass(factory) and (lacks := missing_methods(factory)):
        raise ValueError(
            f"{where} lacks {', '.join(lacks)} (a controller needs {', '.join(REQUIRED_METHODS)})"
        )
    kwargs = constructor_kwargs(factory, args, reserved=("seed",))
    try:
        names = frozenset(inspect.signature(factory).parameters)
    except (TypeError, ValueError):
        names = frozenset()
    return factory, where, tuple(kwargs.items()), names


def build_external(spec: str, seed: int = 0, **defaults: Any) -> Any:
    """The controller of an external ``spec`` (module docstring), with ``seed`` passed
    when the constructor takes one, and each of ``defaults`` (e.g. a scenario's ``tau``)
    that the constructor names and the spec does not set. Raises ValueError naming the
    spec and what is wrong:
    file/module/class not found, a missing method, an option the constructor does not
    take or a bad value, a constructor that raises, ``candidates`` given but not valid."""
    try:
        factory, where, items, names = _prepared(spec)
        kwargs = {k: v for k, v in defaults.items() if k in names} | dict(items)
        if "seed" in names:
            kwargs["seed"] = seed
        try:
            ctl = factory(**kwargs)
        except Exception as exc:
            raise ValueError(f"{where}: constructor raised {one_line(exc)}") from None
        if lacks := missing_methods(ctl):
            raise ValueError(
                f"{where} lacks {', '.join(lacks)} (a controller needs {', '.join(REQUIRED_METHODS)})"
            )
        if getattr(ctl, "candidates", None) is not None:  # optional; check-controller needs it
            check_candidates(ctl, where)
        try:  # the trace stores the state as JSON after every step
            json.dumps(ctl.state_dict(), allow_nan=False)
        except Exception as exc:
            raise ValueError(f"{where}: state_dict() is not JSON ({one_line(exc)})") from None
    except ValueError as exc:
        raise ValueError(f"controller spec {spec!r}: {exc}") from None
    if getattr(ctl, "name", None) is None:
        try:
            ctl.name = spec
        except AttributeError:
            pass
    return ctl
