"""Controller specs of the CLI to objects: the built-in ``static:G``, ``sagc[:k=v,...]``
and ``lagc[:k=v,...]``, and controllers from outside the package
(:mod:`sim.control.plugins`: ``file.py:Class[:k=v,...]``, ``module:Class[:k=v,...]``,
entry points of ``rolloutlab.controllers``).

Kept apart from :mod:`sim.control.controllers` so that module does not import :mod:`sim.control.lagc`
(which builds on it): no import cycle.
"""

from __future__ import annotations

from typing import Any

from rolloutlab.sim.control.contract import Controller
from rolloutlab.sim.control.controllers import SAGC, StaticG
from rolloutlab.sim.control.lagc import LAGC
from rolloutlab.sim.control.observation import propose_step
from rolloutlab.sim.control.options import finite_float, split_options, strict_int
from rolloutlab.sim.control.plugins import build_external

_SAGC_INT = ("radius", "init_G", "G_min", "length_history")
_SAGC_FLOAT = (
    "tau",
    "delta",
    "eta_lambda",
    "gamma",
    "step_time_budget_s",
    "level",
    "prior_n",
    "length_history_n",
)
_LAGC_FLOAT = ("pop_gamma", "prompt_decay", "length_gamma", "c_max")


def parse_controller(spec: str, seed: int = 0, **sagc_defaults: Any) -> Controller:
    """Build a controller from a CLI spec.

    ``static:G`` -> :class:`StaticG`; ``sagc`` or ``sagc:key=value,...`` -> :class:`SAGC`
    (keys: ``tau, delta, eta_lambda, gamma, radius, init_G, G_min, step_time_budget_s,
    forget, prior_n, length_history, length_history_n``; ``candidates=4/8/16``, ``prior_p=0.1/0.4/0.8``); ``lagc[:key=value,...]`` -> :class:`sim.control.lagc.LAGC`
    (the SAGC keys, for its straggler constraint, and ``signal, pop_gamma, prompt_decay,
    length_gamma, c_max, max_prompts``). ``sagc_defaults`` (e.g. a scenario's ``tau``)
    apply to SAGC and LAGC unless the spec overrides them. Anything else is an external
    controller (:func:`sim.control.plugins.build_external`, with ``seed``, and the
    ``sagc_defaults`` its constructor names, e.g. ``tau``, unless the spec sets them).

    Numbers must be finite (``tau=nan`` and ``delta=inf`` are refused before the
    constructor's range checks, which ``nan`` would pass); a key may appear once.

    Raises: ValueError naming the spec (and the option) on anything else.
    """
    spec = spec.strip()
    kind, _, args = spec.partition(":")
    if kind == "static":
        try:
            return StaticG(int(args))
        except ValueError:
            raise ValueError(
                f"controller spec {spec!r}: expected static:G with G a positive int"
            ) from None
    if kind not in ("sagc", "lagc"):
        return build_external(spec, seed, **sagc_defaults)
    kwargs: dict[str, Any] = dict(sagc_defaults)
    try:
        pairs = split_options(args)
    except ValueError as exc:
        raise ValueError(f"controller spec {spec!r}: {exc}") from None
    for key, val in pairs:
        try:
            kwargs.update(_option(kind, key, val))
        except ValueError as exc:
            raise ValueError(f"controller spec {spec!r}: option {key!r}: {exc}") from None
    try:
        ctl: Any = SAGC(seed=seed, **kwargs) if kind == "sagc" else LAGC(seed=seed, **kwargs)
    except ValueError as exc:
        raise ValueError(f"controller spec {spec!r}: {exc}") from None
    if args:
        ctl.name = spec
    return ctl


def check_spec(spec: str, seed: int = 0, **sagc_defaults: Any) -> Controller:
    """:func:`parse_controller`, then one ``propose()`` of that fresh controller through
    :func:`sim.control.observation.propose_step` (a G that is not a positive int, or not one of
    its ``candidates`` where it declares them, is refused), for the checks a command
    makes before it writes anything. Returns the probed controller (do not run it: it has proposed once).
    Raises ValueError naming the spec."""
    ctl = parse_controller(spec, seed, **sagc_defaults)
    try:
        G = propose_step(ctl)
    except ValueError as exc:
        raise ValueError(f"controller spec {spec!r}: {exc}") from None
    cands = getattr(ctl, "candidates", None)  # optional for a user's controller
    if cands is not None and G not in tuple(cands):
        raise ValueError(
            f"controller spec {spec!r}: first propose() gave G={G}, not in candidates {cands}"
        )
    return ctl


def _option(kind: str, key: str, val: str) -> dict[str, Any]:
    """One ``key=value`` of a SAGC/LAGC spec as a keyword argument (ValueError if unknown,
    not a number where one is needed, or not finite)."""
    if key == "candidates":
        return {key: tuple(strict_int(v) for v in val.split("/"))}
    if key == "prior_p":
        return {key: tuple(finite_float(v) for v in val.split("/"))}
    if key in _SAGC_INT or (kind == "lagc" and key == "max_prompts"):
        return {key: strict_int(val)}
    if key in _SAGC_FLOAT or (kind == "lagc" and key in _LAGC_FLOAT):
        return {key: finite_float(val)}
    if key in ("forget", "reading") or (kind == "lagc" and key == "signal"):
        return {key: val}
    raise ValueError(f"unknown {kind.upper()} option")
