"""Studies built on :func:`sim.pipelines.simulate`: a comparison of controllers and
pipelines on one prompt stream (:func:`run_comparison`), grid sweeps (:func:`run_sweep`)
and staleness/learning-rate stability grids (:func:`run_grid`).
"""

from rolloutlab.sim import lazy_exports

_INTERFACE = {
    "run_comparison": "compare",
    "check_comparison": "compare",
    "run_sweep": "sweep",
    "run_grid": "stability",
}
"""Exported name -> the module of this package that defines it."""

__all__ = sorted(_INTERFACE)
__getattr__, __dir__ = lazy_exports(__name__, _INTERFACE)
