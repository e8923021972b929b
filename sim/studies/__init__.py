"""Studies built on :func:`sim.pipelines.simulate`: a comparison of controllers and
pipelines on one prompt stream (:func:`run_comparison`), grid sweeps (:func:`run_sweep`)
and staleness/learning-rate stability grids (:func:`run_grid`).
"""

from rolloutlab.sim import lazy_exports

# module of this package -> the interface names it defines
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "compare": "run_comparison check_comparison",
        "sweep": "run_sweep",
        "stability": "run_grid",
    },
)
