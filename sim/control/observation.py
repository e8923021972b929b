"""What a controller sees after a step, and the one place that hands it over.

Every controller has ``observe(lengths)`` (:class:`rolloutlab.sim.control.contract.Controller`, the contract).
A controller that wants more than lengths declares it in a class or instance attribute
``observes``: a tuple of names taken from :data:`EXTRAS`. :func:`observe_step` then
passes those as keyword arguments, so ``observe(lengths)`` keeps working unchanged for
controllers that declare nothing.

Extras (all optional; ``None`` when the run does not have them):

- ``rewards``: ``(n_prompts, G)`` float array of the step's rollout rewards (0/1 for
  verifiable tasks), rows in the order of ``lengths``;
- ``gen_time_s``: the step's generation time in seconds (verl ``timing_s/gen``);
- ``step_time_s``: the step's wall-clock time in seconds (generation + update + sync);
- ``prompt_ids``: ``(n_prompts,)`` int array of the prompts' ids, rows in the order of
  ``lengths``;
- ``finish_reasons`` (version 2): ``(n_prompts, G)`` str array, ``"stop"`` (end of
  sequence), ``"length"`` (hit the response cap) or ``"abort"``; the trace's
  ``finish_reason`` values;
- ``learner_time_s`` (version 2): the step's learner update time in seconds (verl
  ``timing_s/update_actor``);
- ``wall_clock_s`` (version 2): the run's clock when the step ended, seconds since the
  run started;
- ``observation`` (version 2): all of the above in one :class:`Observation`.

Versions: 1 = lengths, rewards, gen_time_s, step_time_s, prompt_ids; 2 (current) adds
finish_reasons, learner_time_s, wall_clock_s and the :class:`Observation` object. A
controller that needs a newer observation than this rolloutlab gives sets
``observation_version``; :func:`wants` refuses it by name.
"""

from __future__ import annotations

import inspect
import json
import numbers
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

OBSERVATION_VERSION = 2
"""Version of :class:`Observation` (module docstring: what each version holds)."""

FIELDS = (
    "rewards",
    "gen_time_s",
    "step_time_s",
    "prompt_ids",
    "finish_reasons",
    "learner_time_s",
    "wall_clock_s",
)
"""What the pipelines and real loops may pass to :func:`observe_step` beside lengths."""

EXTRAS = (*FIELDS, "observation")
"""Names a controller may list in its ``observes`` attribute."""


@dataclass(frozen=True)
class Observation:
    """One step as a controller may see it (module docstring: fields, units, shapes).

    ``lengths``: response tokens, one sequence per prompt (or an ``(n_prompts, G)``
    array); every other field ``None`` when the run does not have it. ``version``:
    :data:`OBSERVATION_VERSION`.
    """

    lengths: Any
    rewards: Any = None
    prompt_ids: Any = None
    finish_reasons: Any = None
    gen_time_s: float | None = None
    learner_time_s: float | None = None
    step_time_s: float | None = None
    wall_clock_s: float | None = None
    version: int = OBSERVATION_VERSION


def wants(controller: Any) -> tuple[str, ...]:
    """The extras ``controller`` declares in ``observes`` (empty tuple if none).

    Raises ValueError naming the controller and the unknown name if it asks for
    something not in :data:`EXTRAS`, or if its ``observation_version`` is newer than
    :data:`OBSERVATION_VERSION`.
    """
    who = getattr(controller, "name", None) or type(controller).__name__
    need = getattr(controller, "observation_version", None)
    if need is not None and int(need) > OBSERVATION_VERSION:
        raise ValueError(
            f"controller {who} needs observation version {need}; this rolloutlab gives "
            f"version {OBSERVATION_VERSION}"
        )
    names = tuple(getattr(controller, "observes", ()) or ())
    unknown = [n for n in names if n not in EXTRAS]
    if unknown:
        raise ValueError(
            f"controller {who} asks to observe {unknown}; known extras: {', '.join(EXTRAS)}"
        )
    return names


def needs(controller: Any, name: str) -> bool:
    """Whether ``controller`` gets the extra ``name`` (declared itself or through
    ``observation``): lets a caller skip computing what nobody reads."""
    names = wants(controller)
    return name in names or "observation" in names


class ControllerError(RuntimeError):
    """A user's controller raised inside ``propose()`` or ``observe()``: the one-line
    message names the controller, the method, the exception and the file and line of the
    controller's code where it was raised (the original is the ``__cause__``)."""


@contextmanager
def _calling(controller: Any, method: str) -> Iterator[None]:
    """Raise what a controller from outside the package raises in the body as a
    :class:`ControllerError` (the built-in ones' errors pass through unchanged)."""
    try:
        yield
    except Exception as exc:
        if type(controller).__module__.startswith("rolloutlab."):
            raise
        frames = traceback.extract_tb(exc.__traceback__)
        try:
            src = inspect.getsourcefile(type(controller))
        except TypeError:
            src = None
        at = ([f for f in frames if f.filename == src] or frames)[-1]
        who = getattr(controller, "name", None) or type(controller).__name__
        text = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise ControllerError(
            f"controller {who}: {method}() raised {text} "
            f"(at {at.filename}, line {at.lineno}, in {at.name})"
        ) from exc


def observe_step(controller: Any, lengths: Sequence[Sequence[int]] | Any, **extras: Any) -> None:
    """Call ``controller.observe(lengths, **wanted)`` with the extras it declared.

    ``lengths``: the step's response lengths (tokens), one sequence per prompt (or an
    ``(n_prompts, G)`` array). ``extras``: any of :data:`FIELDS`; the ones the controller
    does not declare are not passed. A declared extra missing from ``extras`` is passed
    as ``None`` (the run does not have it); a declared ``observation`` is the
    :class:`Observation` of all of them. Raises ValueError for an unknown extra name;
    :class:`ControllerError` (file and line) when an outside controller's observe raises.
    """
    unknown = [k for k in extras if k not in FIELDS]
    if unknown:
        raise ValueError(f"observe_step: unknown extras {unknown}; known: {', '.join(FIELDS)}")
    names = wants(controller)
    given = {n: extras.get(n) for n in names if n != "observation"}
    if "observation" in names:
        given["observation"] = Observation(lengths, **extras)
    with _calling(controller, "observe"):
        controller.observe(lengths, **given)


def propose_step(controller: Any, prompt_ids: Any = None) -> int:
    """``controller.propose()``, or ``controller.propose(prompt_ids=prompt_ids)`` for a
    controller whose ``proposes`` attribute lists ``"prompt_ids"`` (it can use the next
    batch's prompts, e.g. :class:`rolloutlab.sim.control.lagc.LAGC`'s per-prompt pass rates).

    ``prompt_ids``: ``(n_prompts,)`` ints of the batch about to be generated, or None when
    the pipeline does not know them. Returns the proposed G (int). Raises ValueError
    naming the controller when it returns anything but a positive int (a bool, a float,
    0, a negative number); :class:`ControllerError` (file and line) when an outside
    controller's propose raises.
    """
    with _calling(controller, "propose"):
        if prompt_ids is not None and "prompt_ids" in tuple(
            getattr(controller, "proposes", ()) or ()
        ):
            G = controller.propose(prompt_ids=prompt_ids)
        else:
            G = controller.propose()
    if isinstance(G, numbers.Integral) and not isinstance(G, bool) and int(G) >= 1:
        return int(G)  # numpy integers are Integral too
    who = getattr(controller, "name", None) or type(controller).__name__
    raise ValueError(f"controller {who}: propose() returned {G!r}; G must be a positive int")


def reason_json(controller: Any) -> str | None:
    """JSON of ``controller.explain()`` (the contract's optional reason for its last
    decision: :mod:`sim.control.contract`), or None when it has no ``explain``: the step
    table's ``controller_reason`` column (:mod:`sim.trace.schema`)."""
    explain = getattr(controller, "explain", None)
    if not callable(explain):
        return None
    with _calling(controller, "explain"):
        return json.dumps(explain(), allow_nan=False, default=float)
