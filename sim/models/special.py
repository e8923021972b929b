"""The special functions of :mod:`scipy.special` the models use, imported on first call.

Why: ``import scipy.special`` costs about 0.25 s of CPU (it loads its array-API layer),
and every model module is imported by the CLI's option tables, so ``rolloutlab sim
--help`` paid it without calling any. Each name here is the scipy ufunc itself once
called (same arguments, ``out=`` included, same results).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def _lazy(name: str) -> Callable[..., Any]:
    """A function that calls ``scipy.special.<name>`` with its arguments."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module("scipy.special"), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``scipy.special.{name}`` (imported on first call; module docstring)."
    return call


ndtr = _lazy("ndtr")
ndtri = _lazy("ndtri")
log_ndtr = _lazy("log_ndtr")
stdtr = _lazy("stdtr")
stdtrit = _lazy("stdtrit")
expit = _lazy("expit")
logit = _lazy("logit")
