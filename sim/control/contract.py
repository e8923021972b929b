"""The controller contract, in one place: what :mod:`sim.pipelines` and :mod:`real` rely on
from a group-size controller, whether bundled (:mod:`sim.control.controllers`,
:mod:`sim.control.lagc`) or a user's plug-in (:mod:`sim.control.plugins`).

Required (:data:`REQUIRED_METHODS`, :class:`Controller`):

- ``propose() -> int``: the group size G for the next step (a positive int; numpy
  integers are accepted);
- ``observe(lengths)``: response lengths (tokens) of the step just run with the last
  proposed G, one sequence per prompt (or an ``(n_prompts, G)`` array);
- ``state_dict()`` / ``load_state_dict(d)``: JSON-serialisable state (RNG included) that
  restores the controller exactly: a resumed run makes the same decisions.

Optional attributes and methods:

- ``name``: how tables and errors name it (else the class name);
- ``candidates``: the group sizes it may propose (positive ints; :func:`check_candidates`).
  Required by ``check-controller``, which tests ``propose()`` against it; not needed by
  ``sim``, ``sweep`` or ``real``;
- ``observes``: extras it wants beside lengths (rewards, times, prompt ids, finish
  reasons, the whole :class:`~sim.control.observation.Observation`), handed over as
  keyword arguments by :func:`sim.control.observation.observe_step`, the one place that
  calls ``observe``; ``observation_version``: the newest observation it needs;
- ``proposes = ("prompt_ids",)``: ``propose(prompt_ids=...)`` gets the next step's
  prompts (:func:`sim.control.observation.propose_step`);
- ``straggler_budget``: the straggler rate it promises to hold (checked by the kit);
- ``explain() -> dict``: why it proposed the last G (JSON-able: threshold crossed,
  budget, candidates considered); written per step to the trace's ``controller_reason``
  (:func:`sim.control.observation.reason_json`; null without it);
- ``observe_steps(lengths (T, n_prompts, G)) -> list[str]``: for an open-loop controller,
  ``T`` observations at once and the JSON state after each (the fast path uses it for
  blocks of steps).

The executable form of this contract is :mod:`rolloutlab.testing` (``check-controller``):
hypothesis plays observation streams and reports the smallest one that breaks a property.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Controller(Protocol):
    """What :mod:`sim.pipelines.sync` and :mod:`real` need from a group-size controller."""

    name: str

    def propose(self) -> int:
        """Return G for the next step (a positive int)."""

    def observe(self, lengths: Sequence[Sequence[int]]) -> None:
        """Take the response lengths (tokens) of the step just run, one list per prompt."""

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state; ``load_state_dict`` of it restores the controller."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict` output."""


REQUIRED_METHODS = ("propose", "observe", "state_dict", "load_state_dict")
"""What :mod:`sim.pipelines.sync` and :mod:`real` call on a controller."""


def missing_methods(obj: Any) -> list[str]:
    """The :data:`REQUIRED_METHODS` that ``obj`` (class or instance) lacks."""
    return [m for m in REQUIRED_METHODS if not callable(getattr(obj, m, None))]


def check_candidates(ctl: Any, where: str) -> tuple[int, ...]:
    """``ctl.candidates`` as a tuple of positive ints; ValueError naming ``where`` if it
    is missing, empty or holds anything else."""
    cands = getattr(ctl, "candidates", None)
    try:
        out = tuple(cands)  # type: ignore[arg-type]
        bad = not out or any(isinstance(g, bool) or int(g) != g or g < 1 for g in out)
    except (TypeError, ValueError, OverflowError):  # not iterable; a str, None or NaN inside
        bad = True
    if bad:
        raise ValueError(
            f"{where} needs a 'candidates' attribute: the group sizes it may propose "
            f"(positive ints), got {cands!r}"
        )
    return tuple(int(g) for g in out)
