"""Which framework versions the integrations are written for, and the one-line refusal when
another (or none) is installed.

Each integration was written against one release's sources (read in its site-packages):
a different release may rename the methods it overrides, so it is refused rather than
half-working.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from types import ModuleType

WRITTEN_FOR = {"trl": "1.16.0", "verl": "0.9.1"}
"""Framework name -> the release its integration was written and tested against."""

EXTRA = {
    "trl": "pip install 'rolloutlab[trl]' (trl==1.16.0, datasets, accelerate; make venv installs it)",
    "verl": "pip install --no-deps verl==0.9.1 into the environment verl runs in (docs/frameworks.md)",
}
"""Framework name -> how to install the version :data:`WRITTEN_FOR` names."""


class FrameworkError(ImportError):
    """The framework is not installed, or not at the release its integration was written
    for; the message is one line naming the framework, the versions and how to install."""


def installed_version(name: str) -> str | None:
    """The installed distribution version of ``name`` (None when it is not installed)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_version(name: str, found: str | None) -> None:
    """Raise :class:`FrameworkError` unless ``found`` is the release :data:`WRITTEN_FOR`
    names for ``name`` (``found`` None: not installed)."""
    want = WRITTEN_FOR[name]
    if found is None:
        raise FrameworkError(f"{name} is not installed: {EXTRA[name]}")
    if found != want:
        raise FrameworkError(
            f"rolloutlab's {name} integration is written for {name} {want}; found {name} "
            f"{found}: {EXTRA[name]}"
        )


def require(name: str) -> ModuleType:
    """Import framework ``name`` after :func:`check_version`; raises :class:`FrameworkError`
    (one line) when it is missing or at another release."""
    check_version(name, installed_version(name))
    try:
        return importlib.import_module(name)
    except ImportError as err:
        # The distribution's metadata is there but the package does not import (a broken or
        # partial install): the same one line, with the reason.
        raise FrameworkError(
            f"{name} {WRITTEN_FOR[name]} does not import ({err}): {EXTRA[name]}"
        ) from err
