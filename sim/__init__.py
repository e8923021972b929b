"""rolloutlab.sim: the base layer (no torch, vllm, click or plotting).

Sub-packages by role; each layer imports only the layers below it (import-linter's
contracts in pyproject.toml):

- :mod:`sim.trace` (layer 0): the trace schema, its writers, strict JSON, metrics;
- :mod:`sim.models` (1): response lengths, cost and roofline, pass rates, rewards, learning,
  staleness;
- :mod:`sim.engine` and :mod:`sim.control` (2): the SimPy engine (slot and paged workers,
  KV and prefix cache, dispatch, fast path); the group-size controllers and their contract;
- :mod:`sim.scenario` (3): a calibrated scenario (models + engine config), overrides,
  provenance;
- :mod:`sim.pipelines` (4): the synchronous and asynchronous pipelines behind one
  interface (:func:`sim.pipelines.simulate`);
- :mod:`sim.studies` (5): comparisons, sweeps and stability grids.

Each sub-package's ``__init__`` states its interface and re-exports only that, lazily:
importing one module of a package does not import its siblings (:func:`lazy_exports`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, modules: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for a package whose interface names live in its
    modules (PEP 562): ``modules`` maps each module (relative to ``package``) to the
    space-separated names of the interface it defines, imported on first use. Why lazy:
    ``import rolloutlab.sim.models.cost`` runs ``sim/models/__init__.py`` first,
    which must not import every model.

    Raises (from ``__getattr__``): AttributeError for a name that is not exported.
    """
    table = {name: module for module, names in modules.items() for name in names.split()}

    def __getattr__(name: str) -> Any:
        try:
            module = table[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def __dir__() -> list[str]:
        return sorted(table)

    return __getattr__, __dir__, sorted(table)
