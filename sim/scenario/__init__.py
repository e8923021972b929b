"""A calibrated scenario: length, cost, pass-rate and learning models with an
engine configuration, loaded from a bundled name or a calibration file
(:func:`load_scenario`, :class:`Scenario`, :class:`CalibrationError`), command-line
overrides (:func:`apply_overrides`) and the provenance written next to every result
(:func:`write_config`).
"""

from rolloutlab.sim import lazy_exports

_INTERFACE = {
    "Scenario": "scenario",
    "CalibrationError": "scenario",
    "load_scenario": "scenario",
    "bundled_scenarios": "scenario",
    "scenario_from_dict": "scenario",
    "apply_overrides": "overrides",
    "write_config": "provenance",
    "library_versions": "provenance",
}
"""Exported name -> the module of this package that defines it."""

__all__ = sorted(_INTERFACE)
__getattr__, __dir__ = lazy_exports(__name__, _INTERFACE)
