"""Scenarios: a calibrated length model, cost model and cluster, loaded from JSON.

A calibration file (written by :mod:`calibration`, read here) is a JSON object::

    {"format": "rolloutlab.calibration", "version": 1, "name": "...",
     "lengths": {"kind": "lognormal", "mu": .., "sigma_prompt": .., "sigma_within": ..,
                 "max_response_length": .., "mu_growth_per_step": 0.0,
                 "sigma_growth_per_step": 0.0, "within_law": "normal" (or "gumbel", "t"), "within_df": 0.0}
                | {"kind": "empirical", "values": [...], "max_response_length": ..,
                   "groups": [[...], ...], "replace": true,
                   "group_steps": [...], "step_window": W (optional: step-indexed,
                   :class:`sim.models.stepped_lengths.SteppedEmpiricalLengths`)},
     "prompt_tokens": 104,
     "cost": {<sim.models.cost.LinearCost fields>},
     "engine": {"n_workers": 8, "max_num_seqs": 256, "dispatch": "group"},
     "defaults": {"prompts": 64, "steps": 300, "tau": 4.0},
     "pass_rate": {"spec": "beta:A,B", "coupling": c, "provenance": {...}, "fit": {...}},
     "learning": {<sim.models.learning.LearningParams fields>, "provenance": {...}},
     "multi_turn": {<sim.models.turns block: turns, tool_latency, sandboxes, timeout_s, ...>},
     "provenance": {...}, "fit": {...}}

``pass_rate`` and ``learning`` are optional: without ``pass_rate`` a run has
no rewards unless ``--pass-rate`` is given; without ``learning`` pass rates stay at
their initial values.

``provenance`` and ``fit`` are carried along untouched (source files, hashes, fit
quality). Bundled scenarios live in ``sim/data/*.json`` and are listed by
:func:`bundled_scenarios`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rolloutlab.sim.engine.config import EngineConfig
from rolloutlab.sim.models.cost import LinearCost
from rolloutlab.sim.models.lengths import EmpiricalLengths, LengthModel, LognormalLengths
from rolloutlab.sim.models.passrate import PassRateModel, parse_pass_rate
from rolloutlab.sim.models.rewards import learning_params
from rolloutlab.sim.models.step_phases import StepPhases
from rolloutlab.sim.models.stepped_lengths import SteppedEmpiricalLengths
from rolloutlab.sim.models.turns import MultiTurn, multi_turn_from
from rolloutlab.sim.scenario.bundled import bundled_scenarios
from rolloutlab.sim.scenario.defaults import ScenarioDefaults
from rolloutlab.sim.trace.field_checks import number, reject_constant

if TYPE_CHECKING:
    from rolloutlab.sim.models.learning import LearningParams

FORMAT = "rolloutlab.calibration"
VERSION = 1


class CalibrationError(ValueError):
    """A calibration file that cannot be used; the message names the file and field."""


@dataclass(frozen=True)
class Scenario:
    """Everything the simulator needs besides the controller and the run length."""

    name: str
    lengths: LengthModel
    prompt_tokens: int
    """Prompt length in tokens (every prompt)."""
    cost: LinearCost
    engine: EngineConfig
    defaults: dict[str, Any] = field(default_factory=dict)
    """Suggested ``prompts``, ``steps``, ``tau`` for this scenario (typed, with the
    package's fallbacks: :attr:`run_defaults`)."""
    source: dict[str, Any] = field(default_factory=dict)
    """The raw JSON (provenance and fit quality included), for ``config.json``."""
    pass_rate: PassRateModel | None = None
    """The ``pass_rate`` block's model (its ``spec`` with its ``coupling``), or ``None``."""
    learning: LearningParams | None = None
    """The ``learning`` block's learning-progress parameters, or ``None``."""
    multi_turn: MultiTurn | None = None
    """Multi-turn tool-using rollouts (:mod:`sim.models.turns`), or ``None`` (one turn)."""
    step_phases: StepPhases | None = None
    """Reward and periodic phases of a step (:mod:`sim.models.step_phases`), or ``None``
    (a step is generation, learner and weight sync only)."""

    @property
    def run_defaults(self) -> ScenarioDefaults:
        """:attr:`defaults` typed, a missing key taking the package's default."""
        return ScenarioDefaults.of(self.defaults)


def _block(d: dict, key: str, path: str) -> dict[str, Any] | None:
    """An optional object-valued block. Raises :class:`CalibrationError` naming the field."""
    block = d.get(key)
    if block is not None and not isinstance(block, dict):
        raise CalibrationError(f"{path}: field {key!r} must be an object")
    return block


def _pass_rate_from(d: dict, path: str) -> PassRateModel | None:
    """The optional ``pass_rate`` block's model: ``spec`` (``fixed:P`` or ``beta:A,B``) with
    its ``coupling``. Raises :class:`CalibrationError` naming the field."""
    block = _block(d, "pass_rate", path)
    if block is None:
        return None
    spec = block.get("spec")
    if not isinstance(spec, str) or not spec.startswith(("fixed:", "beta:")):
        raise CalibrationError(
            f"{path}: field pass_rate.spec: expected 'fixed:P' or 'beta:A,B', got {spec!r}"
        )
    try:
        coupling = float(block.get("coupling", 0.0))
        model = parse_pass_rate(spec, coupling)
    except (TypeError, ValueError) as exc:
        raise CalibrationError(f"{path}: field 'pass_rate': {exc}") from None
    if not np.isfinite(coupling):
        raise CalibrationError(f"{path}: field pass_rate.coupling is not finite")
    return model


def _learning_from(d: dict, path: str) -> LearningParams | None:
    """The optional ``learning`` block's parameters (``provenance`` and other keys that are
    not parameters ignored). Raises :class:`CalibrationError` naming the field."""
    try:
        return learning_params(_block(d, "learning", path), "field 'learning'")
    except ValueError as exc:
        raise CalibrationError(f"{path}: {exc}") from None


def _get(d: dict, key: str, where: str, path: str):
    if not isinstance(d, dict) or key not in d:
        raise CalibrationError(f"{path}: missing field {where}{key!r}")
    return d[key]


def _num(d: dict, key: str, where: str, path: str, **check: Any) -> Any:
    """Field ``where + key`` of ``d`` checked by :func:`sim.trace.field_checks.number`; a
    :class:`CalibrationError` naming ``path`` and the field."""
    try:
        return number(_get(d, key, where, path), where + key, **check)
    except ValueError as exc:
        raise CalibrationError(f"{path}: {exc}") from None


def _lengths_from(d: dict, path: str) -> LengthModel:
    if not isinstance(d, dict):
        raise CalibrationError(f"{path}: field 'lengths' must be an object")
    kind = _get(d, "kind", "lengths.", path)
    cap = _num(d, "max_response_length", "lengths.", path, integer=True, min=1)
    if kind == "lognormal":
        vals = {
            "mu": _num(d, "mu", "lengths.", path),
            "sigma_prompt": _num(d, "sigma_prompt", "lengths.", path, min=0),
            "sigma_within": _num(d, "sigma_within", "lengths.", path, min=0),
        }
        extra = {
            k: _num(d, k, "lengths.", path) if k in d else 0.0
            for k in ("mu_growth_per_step", "sigma_growth_per_step")
        }
        try:
            law = str(d.get("within_law", "normal"))
            df = float(d.get("within_df", 0.0))
            return LognormalLengths(
                max_response_length=cap, **vals, **extra, within_law=law, within_df=df
            )
        except ValueError as exc:
            raise CalibrationError(f"{path}: field 'lengths': {exc}") from None
    if kind == "empirical":
        try:
            values = np.asarray(_get(d, "values", "lengths.", path), dtype=np.int64)
            groups = tuple(np.asarray(g, dtype=np.int64) for g in d.get("groups", []))
        except (TypeError, ValueError, OverflowError):
            raise CalibrationError(
                f"{path}: field lengths.values/groups: expected lists of integer lengths"
            ) from None
        try:
            if "step_window" in d:
                return _stepped_from(d, groups, cap, path)
            return EmpiricalLengths(
                values=values,
                max_response_length=cap,
                groups=groups,
                replace=bool(d.get("replace", True)),
            )
        except ValueError as exc:
            raise CalibrationError(f"{path}: field 'lengths': {exc}") from None
    raise CalibrationError(
        f"{path}: field lengths.kind: expected 'lognormal' or 'empirical', got {kind!r}"
    )


def _stepped_from(d: dict, groups: tuple, cap: int, path: str) -> SteppedEmpiricalLengths:
    """The step-indexed empirical model of ``lengths.step_window`` and
    ``lengths.group_steps`` (one integer step per group)."""
    window = _num(d, "step_window", "lengths.", path, integer=True, min=1)
    try:
        steps = np.asarray(_get(d, "group_steps", "lengths.", path), dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise CalibrationError(
            f"{path}: field lengths.group_steps: expected a list of integer steps"
        ) from None
    if steps.shape != (len(groups),):
        raise CalibrationError(
            f"{path}: field lengths.group_steps: {steps.size} steps for {len(groups)} groups"
        )
    return SteppedEmpiricalLengths(
        groups, steps, int(window), cap, replace=bool(d.get("replace", False))
    )


_DEFAULT_CHECKS = {
    "prompts": (int, lambda v: v >= 1, "an integer >= 1"),
    "steps": (int, lambda v: v >= 1, "an integer >= 1"),
    "tau": (float, lambda v: v > 1.0, "a number > 1"),
    "delta": (float, lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]"),
    "target_reward": (float, lambda v: 0.0 <= v <= 1.0, "a reward in [0, 1]"),
    "lr": (float, lambda v: 0.0 < v < math.inf, "a finite learning rate > 0"),
}


def _defaults_from(d: Any, path: str) -> dict[str, Any]:
    """Check the ``defaults`` block (suggested prompts, steps, SAGC tau and delta, target
    reward, the learner's learning rate ``lr``)."""
    if not isinstance(d, dict):
        raise CalibrationError(
            f"{path}: field 'defaults' must be an object, got {type(d).__name__}"
        )
    out = dict(d)
    for key, (kind, ok, what) in _DEFAULT_CHECKS.items():
        if key not in d:
            continue
        try:
            value = kind(d[key])
            if kind is int and value != d[key]:
                raise ValueError
        except (TypeError, ValueError):
            raise CalibrationError(
                f"{path}: field defaults.{key}: expected {what}, got {d[key]!r}"
            ) from None
        if not ok(value):
            raise CalibrationError(f"{path}: field defaults.{key}: expected {what}, got {d[key]!r}")
        out[key] = value
    return out


def scenario_from_dict(d: dict[str, Any], path: str = "<dict>") -> Scenario:
    """Build a :class:`Scenario` from a calibration dict.

    Raises: :class:`CalibrationError` on another format or version, a missing field or
    a bad value, naming ``path`` and the field.
    """
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise CalibrationError(
            f"{path}: field 'format': expected {FORMAT!r}, "
            f"got {d.get('format') if isinstance(d, dict) else type(d).__name__!r}"
        )
    if d.get("version") != VERSION:
        raise CalibrationError(
            f"{path}: field 'version': this rolloutlab reads calibration "
            f"version {VERSION}, got {d.get('version')!r}"
        )
    cost_d = _get(d, "cost", "", path)
    if not isinstance(cost_d, dict):
        raise CalibrationError(f"{path}: field 'cost' must be an object")
    known = {f.name for f in fields(LinearCost)}
    unknown = set(cost_d) - known
    if unknown:
        raise CalibrationError(f"{path}: field 'cost': unknown coefficient(s) {sorted(unknown)}")
    coefficients = {k: _num(cost_d, k, "cost.", path) for k in cost_d}
    engine_d = d.get("engine", {})
    if not isinstance(engine_d, dict):
        raise CalibrationError(f"{path}: field 'engine' must be an object")
    for k in ("n_workers", "max_num_seqs"):
        if k in engine_d:
            _num(engine_d, k, "engine.", path, integer=True, min=1)
    try:
        cost = LinearCost(**coefficients)
        engine = EngineConfig(**engine_d)
    except (TypeError, ValueError) as exc:
        raise CalibrationError(f"{path}: field 'cost'/'engine': {exc}") from None
    defaults = _defaults_from(d.get("defaults", {}), path)
    prompt_tokens = _num(d, "prompt_tokens", "", path, integer=True, min=0)
    return Scenario(
        name=str(d.get("name", Path(path).stem)),
        lengths=_lengths_from(_get(d, "lengths", "", path), path),
        prompt_tokens=prompt_tokens,
        cost=cost,
        engine=engine,
        defaults=defaults,
        source=d,
        pass_rate=_pass_rate_from(d, path),
        learning=_learning_from(d, path),
        multi_turn=_multi_turn(d, path),
        step_phases=_step_phases(d, path),
    )


def _step_phases(d: dict, path: str) -> StepPhases | None:
    """The optional ``step_phases`` block; :class:`CalibrationError` naming the field."""
    block = d.get("step_phases")
    if block is None:
        return None
    if not isinstance(block, dict):
        raise CalibrationError(f"{path}: field 'step_phases' must be an object")
    try:
        return StepPhases.from_dict(block)
    except (KeyError, TypeError, ValueError) as exc:
        raise CalibrationError(f"{path}: field 'step_phases': {exc}") from None


def _multi_turn(d: dict, path: str) -> MultiTurn | None:
    """The optional ``multi_turn`` block; :class:`CalibrationError` naming the field."""
    if d.get("multi_turn") is None:
        return None
    try:
        return multi_turn_from(d["multi_turn"])
    except ValueError as exc:
        raise CalibrationError(f"{path}: {exc}") from None


def read_calibration(path_or_name: str | Path) -> tuple[Any, str]:
    """The JSON of a calibration file, or of a bundled scenario by name (see
    :func:`bundled_scenarios`), unchecked, and the path that names it in messages; for a
    caller that changes it before the one parse (:func:`scenario_from_dict`).

    Raises: :class:`CalibrationError` for a missing or unreadable file or invalid JSON.
    """
    name = str(path_or_name)
    if name in bundled_scenarios():
        text = resources.files("rolloutlab.sim").joinpath("data", f"{name}.json").read_text()
        path = f"sim/data/{name}.json"
    else:
        p = Path(name)
        if not p.exists():
            raise CalibrationError(
                f"{name}: no such calibration file or bundled scenario "
                f"(bundled: {', '.join(bundled_scenarios())})"
            )
        try:
            text, path = p.read_text(), str(p)
        except (OSError, UnicodeDecodeError) as exc:
            raise CalibrationError(f"{name}: cannot read the calibration file ({exc})") from None
    try:
        return json.loads(text, parse_constant=reject_constant), path
    except json.JSONDecodeError as exc:
        raise CalibrationError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except ValueError as exc:
        raise CalibrationError(f"{path}: {exc}") from None


def load_scenario(path_or_name: str | Path) -> Scenario:
    """Load a calibration file, or a bundled scenario by name (see :func:`bundled_scenarios`).

    Raises: :class:`CalibrationError` for a missing/unreadable file or bad content.
    """
    return scenario_from_dict(*read_calibration(path_or_name))
