"""``key=value`` options of a controller spec: text to typed values, checked.

One job: turn the ``k=v,...`` tail of a spec (``sagc:tau=3,delta=0.2``,
``my_file.py:MyController:target=0.3``) into keyword arguments, refusing what a
constructor would silently misuse: ``nan``/``inf`` (``nan <= 1`` is False, so a range
check alone lets it through), a key given twice, a key the constructor does not take
(checked against its signature with :mod:`inspect`), a value of the wrong type.

Values: ``true``/``false`` -> bool; an int literal -> int; a float literal -> float
(finite only); ``a/b/c`` -> a tuple of those (e.g. ``candidates=4/8/16``); anything
else -> str. A parameter's default (or a plain ``int``/``float``/``bool``/``str``
annotation) fixes its type: ``G_max=32`` for ``G_max: int = 16`` is ``32``, ``x=0.5``
for an int parameter is an error naming the option.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import Any

_BOOLS = {"true": True, "false": False}


def split_options(args: str) -> list[tuple[str, str]]:
    """``"a=1,b=x"`` -> ``[("a", "1"), ("b", "x")]``. Raises ValueError naming the item
    for one without ``=`` or with an empty key, and for a key given twice."""
    pairs: list[tuple[str, str]] = []
    for item in filter(None, (s.strip() for s in args.split(","))):
        key, eq, val = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ValueError(f"option {item!r}: expected key=value")
        if any(k == key for k, _ in pairs):
            raise ValueError(f"option {key!r}: given twice")
        pairs.append((key, val.strip()))
    return pairs


def finite_float(text: str) -> float:
    """``text`` as a finite float. Raises ValueError (``nan``, ``inf``, not a number)."""
    try:
        val = float(text)
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None
    if not math.isfinite(val):
        raise ValueError(f"expected a finite number, got {text!r}")
    return val


def strict_int(text: str) -> int:
    """``text`` as an int (``"8"``; not ``"8.5"``, ``"nan"``). Raises ValueError."""
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected an integer, got {text!r}") from None


def infer_value(text: str) -> Any:
    """A value of unknown type: bool, int, finite float, ``/``-tuple, else the string.
    Raises ValueError for ``nan``/``inf`` (a float that is not finite)."""
    if "/" in text:
        return tuple(infer_value(t) for t in text.split("/"))
    if text.lower() in _BOOLS:
        return _BOOLS[text.lower()]
    try:
        return int(text)
    except ValueError:
        pass
    try:
        val = float(text)
    except ValueError:
        return text
    if not math.isfinite(val):
        raise ValueError(f"expected a finite number, got {text!r}")
    return val


def typed_value(text: str, kind: type | None) -> Any:
    """``text`` as ``kind`` (bool/int/float/str), or :func:`infer_value` when None.
    Raises ValueError saying what was expected."""
    if kind is bool:
        if text.lower() not in _BOOLS:
            raise ValueError(f"expected true or false, got {text!r}")
        return _BOOLS[text.lower()]
    if kind is int:
        return strict_int(text)
    if kind is float:
        return finite_float(text)
    if kind is str:
        return text
    return infer_value(text)


def _param_type(param: inspect.Parameter) -> type | None:
    """bool/int/float/str from the default's type or a plain annotation, else None."""
    for hint in (param.annotation, type(param.default)):
        if hint in (bool, int, float, str):
            return hint
        if hint in ("bool", "int", "float", "str"):  # postponed annotations
            return {"bool": bool, "int": int, "float": float, "str": str}[hint]
    return None


def constructor_kwargs(cls: Any, args: str, reserved: tuple[str, ...] = ()) -> dict[str, Any]:
    """The ``k=v,...`` text ``args`` as keyword arguments of ``cls(...)``, each checked
    against ``inspect.signature(cls)``: an unknown key (for a class without ``**kwargs``)
    or one in ``reserved`` (e.g. ``seed``, which comes from ``--seed``) is an error, a
    value is typed by :func:`typed_value` with the parameter's type.

    Raises ValueError naming the option and what it accepts.
    """
    params: Mapping[str, inspect.Parameter]
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):  # no signature (a C type): infer every value
        params = {}
    open_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    named = [
        n
        for n, p in params.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and n not in reserved
    ]
    kwargs: dict[str, Any] = {}
    for key, text in split_options(args):
        if key in reserved:
            raise ValueError(f"option {key!r}: set by the command (--{key}), not in the spec")
        if key not in named and not open_kw:
            accepted = ", ".join(named) if named else "none"
            raise ValueError(f"option {key!r}: not accepted (options: {accepted})")
        kind = _param_type(params[key]) if key in params else None
        try:
            kwargs[key] = typed_value(text, kind)
        except ValueError as exc:
            raise ValueError(f"option {key!r}: {exc}") from None
    return kwargs
