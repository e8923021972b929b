"""The scale of the run a calibration was fitted on, and the settings around it that
``rolloutlab advise`` searches by default.

A calibration file says what it knows of its run: the logged prompt batch ``B``
(``defaults.prompts``, or ``provenance.assumptions.logged_prompts``), the group size ``G``
(``provenance.assumptions.group_size``: assumed when the log does not say, as verl's
TensorBoard scalars do not), the generation workers (``engine.n_workers``) and
``max_num_seqs``, and the placement (``defaults.placement`` or the assumption). Each is returned with where
it came from (``logged``, ``assumed``, ``scenario``, ``default``), so the command prints
what it searched around and on what authority.

Around the run (:func:`neighbourhood`): ``B/2, B, 2B``; ``G/2, G, 2G`` as static
controllers plus SAGC on those candidates; workers ``W/2, W, 2W``; the run's
``max_num_seqs``; the synchronous pipeline and the one-step-off one.
"""

from __future__ import annotations

from dataclasses import dataclass

from rolloutlab.sim.scenario.scenario import Scenario


@dataclass(frozen=True)
class RunScale:
    """What a calibration says about its run's scale."""

    prompts: int
    group_size: int
    workers: int
    max_num_seqs: int
    placement: str | None
    """``colocated`` or ``separate`` where the file says, else None."""
    sources: dict[str, str]
    """Per field: ``logged``, ``assumed``, ``scenario`` or ``default``."""


def run_scale(scenario: Scenario, default_group_size: int = 8) -> RunScale:
    """The run's scale from ``scenario.source`` (module docstring); ``default_group_size``
    where the file names no G at all."""
    src = scenario.source or {}
    assumptions = (src.get("provenance") or {}).get("assumptions") or {}
    sources: dict[str, str] = {}
    if "logged_prompts" in assumptions:
        B, sources["prompts"] = int(assumptions["logged_prompts"]), "logged"
    elif "prompts" in scenario.defaults:
        B, sources["prompts"] = int(scenario.defaults["prompts"]), "scenario"
    else:
        B, sources["prompts"] = 64, "default"
    if "group_size" in assumptions:
        G, sources["group_size"] = int(assumptions["group_size"]), "assumed"
    else:
        G, sources["group_size"] = default_group_size, "default"
    W = int(scenario.engine.n_workers)
    logged_w = (assumptions.get("logged_engine") or {}).get("n_workers")
    sources["workers"] = "assumed" if logged_w == W else "scenario"
    if "placement" in scenario.defaults:
        placement, sources["placement"] = str(scenario.defaults["placement"]), "scenario"
    elif "placement" in assumptions:
        placement, sources["placement"] = str(assumptions["placement"]), "assumed"
    else:
        placement, sources["placement"] = None, "default"
    return RunScale(B, G, W, int(scenario.engine.max_num_seqs), placement, sources)


def _around(v: int, lo: int = 1) -> list[int]:
    """``v/2, v, 2v`` (integers, at least ``lo``, without repeats, ascending)."""
    return sorted({max(lo, v // 2), v, 2 * v})


def neighbourhood(scale: RunScale) -> dict[str, str]:
    """``advise``'s search options around ``scale`` (module docstring), as the
    comma-separated strings its options take."""
    gs = _around(scale.group_size, lo=2)
    controllers = [f"static:{g}" for g in gs] + ["sagc:candidates=" + "/".join(map(str, gs))]
    return {
        "prompts": ",".join(map(str, _around(scale.prompts))),
        "workers": ",".join(map(str, _around(scale.workers))),
        "max_num_seqs": str(scale.max_num_seqs),
        "controllers": ",".join(controllers),
        "pipelines": "sync,one-step-off",
    }
