"""Group-size controllers and their one contract: ``propose() -> G`` and
``observe(lengths)`` (:class:`Controller`), the observation a runner hands them
(:func:`observe_step`, :func:`propose_step`), the bundled controllers (:class:`StaticG`,
:class:`SAGC`, :class:`LAGC`) and the spec parser that builds them or a user's plug-in
(:func:`parse_controller`, :func:`check_spec`). The same objects run in ``sim`` and ``real``.
"""

from rolloutlab.sim import lazy_exports

_INTERFACE = {
    "Controller": "controllers",
    "StaticG": "controllers",
    "SAGC": "controllers",
    "split_specs": "controllers",
    "LAGC": "lagc",
    "Observation": "observation",
    "observe_step": "observation",
    "propose_step": "observation",
    "parse_controller": "spec",
    "check_spec": "spec",
}
"""Exported name -> the module of this package that defines it."""

__all__ = sorted(_INTERFACE)
__getattr__, __dir__ = lazy_exports(__name__, _INTERFACE)
