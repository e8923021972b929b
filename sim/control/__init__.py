"""Group-size controllers and their one contract: ``propose() -> G`` and
``observe(lengths)`` (:class:`Controller`), the observation a runner hands them
(:func:`observe_step`, :func:`propose_step`), the bundled controllers (:class:`StaticG`,
:class:`SAGC`, :class:`LAGC`) and the spec parser that builds them or a user's plug-in
(:func:`parse_controller`, :func:`check_spec`). The same objects run in ``sim`` and ``real``.
"""

from rolloutlab.sim import lazy_exports

# module of this package -> the interface names it defines
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "contract": "Controller REQUIRED_METHODS check_candidates",
        "controllers": "StaticG SAGC split_specs",
        "lagc": "LAGC",
        "observation": "Observation observe_step propose_step",
        "spec": "parse_controller check_spec",
    },
)
