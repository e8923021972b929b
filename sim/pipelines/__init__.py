"""The pipelines behind one interface: :func:`simulate` runs ``cfg.steps`` learner
steps of a :class:`PipelineConfig` (``sync``, ``one-step-off``, ``bounded:S``, ``async:S``,
...) under a controller and returns one :class:`PipelineResult`; :data:`RUNNERS` says which
runner serves which kind on which engine (:mod:`.registry`). :class:`RunConfig` holds the
run's size and seed; :func:`parse_pipeline` reads a pipeline spec.
"""

from rolloutlab.sim import lazy_exports

_INTERFACE = {
    "simulate": "registry",
    "PipelineResult": "registry",
    "RUNNERS": "registry",
    "runner_for": "registry",
    "PipelineConfig": "spec",
    "parse_pipeline": "spec",
    "KINDS": "spec",
    "RunConfig": "sync",
}
"""Exported name -> the module of this package that defines it."""

__all__ = sorted(_INTERFACE)
__getattr__, __dir__ = lazy_exports(__name__, _INTERFACE)
