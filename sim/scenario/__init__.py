"""A calibrated scenario: length, cost, pass-rate and learning models with an
engine configuration, loaded from a bundled name or a calibration file
(:func:`load_scenario`, :class:`Scenario`, :class:`CalibrationError`), command-line
overrides (:func:`apply_overrides`) and the provenance written next to every result
(:func:`write_config`).
"""

from rolloutlab.sim import lazy_exports

# module of this package -> the interface names it defines
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "scenario": "Scenario CalibrationError load_scenario scenario_from_dict",
        "bundled": "bundled_scenarios DEFAULT_SCENARIO",
        "defaults": "ScenarioDefaults",
        "overrides": "apply_overrides",
        "provenance": "write_config library_versions",
    },
)
