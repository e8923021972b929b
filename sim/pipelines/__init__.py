"""The pipelines behind one interface: :func:`simulate` runs ``cfg.steps`` learner
steps of a :class:`PipelineConfig` (``sync``, ``one-step-off``, ``bounded:S``, ``async:S``,
...) under a controller and returns one :class:`PipelineResult`; :data:`RUNNERS` says which
runner serves which kind on which engine (:mod:`.registry`). :class:`RunConfig` holds the
run's size and seed; :func:`parse_pipeline` reads a pipeline spec.
"""

from rolloutlab.sim import lazy_exports

# module of this package -> the interface names it defines
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "registry": "simulate PipelineResult RUNNERS runner_for",
        "spec": "PipelineConfig parse_pipeline KINDS",
        "sync": "RunConfig",
    },
)
