"""What a controller sees after a step, and the one place that hands it over.

Every controller has ``observe(lengths)`` (:class:`rolloutlab.sim.controllers.Controller`).
A controller that wants more than lengths declares it in a class or instance attribute
``observes``: a tuple of names taken from :data:`EXTRAS`. :func:`observe_step` then
passes those as keyword arguments, so ``observe(lengths)`` keeps working unchanged for
controllers that declare nothing (the versioned observation of a later issue builds on
this).

Extras (all optional; ``None`` when the run does not have them):

- ``rewards``: ``(n_prompts, G)`` float array of the step's rollout rewards (0/1 for
  verifiable tasks), rows in the order of ``lengths``;
- ``gen_time_s``: the step's generation time in seconds (verl ``timing_s/gen``);
- ``step_time_s``: the step's wall-clock time in seconds (generation + update + sync);
- ``prompt_ids``: ``(n_prompts,)`` int array of the prompts' ids, rows in the order of
  ``lengths``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

EXTRAS = ("rewards", "gen_time_s", "step_time_s", "prompt_ids")
"""Names a controller may list in its ``observes`` attribute."""


def wants(controller: Any) -> tuple[str, ...]:
    """The extras ``controller`` declares in ``observes`` (empty tuple if none).

    Raises ValueError naming the controller and the unknown name if it asks for
    something not in :data:`EXTRAS`.
    """
    names = tuple(getattr(controller, "observes", ()) or ())
    unknown = [n for n in names if n not in EXTRAS]
    if unknown:
        raise ValueError(
            f"controller {getattr(controller, 'name', type(controller).__name__)} asks to "
            f"observe {unknown}; known extras: {', '.join(EXTRAS)}"
        )
    return names


def observe_step(controller: Any, lengths: Sequence[Sequence[int]] | Any, **extras: Any) -> None:
    """Call ``controller.observe(lengths, **wanted)`` with the extras it declared.

    ``lengths``: the step's response lengths (tokens), one sequence per prompt (or an
    ``(n_prompts, G)`` array). ``extras``: any of :data:`EXTRAS`; the ones the controller
    does not declare are not passed. A declared extra missing from ``extras`` is passed
    as ``None`` (the run does not have it). Raises ValueError for an unknown extra name.
    """
    unknown = [k for k in extras if k not in EXTRAS]
    if unknown:
        raise ValueError(f"observe_step: unknown extras {unknown}; known: {', '.join(EXTRAS)}")
    names = wants(controller)
    if not names:
        controller.observe(lengths)
        return
    controller.observe(lengths, **{n: extras.get(n) for n in names})


def propose_step(controller: Any, prompt_ids: Any = None) -> int:
    """``controller.propose()``, or ``controller.propose(prompt_ids=prompt_ids)`` for a
    controller whose ``proposes`` attribute lists ``"prompt_ids"`` (it can use the next
    batch's prompts, e.g. :class:`rolloutlab.sim.lagc.LAGC`'s per-prompt pass rates).

    ``prompt_ids``: ``(n_prompts,)`` ints of the batch about to be generated, or None when
    the pipeline does not know them. Returns the proposed G (int).
    """
    if prompt_ids is not None and "prompt_ids" in tuple(getattr(controller, "proposes", ()) or ()):
        return int(controller.propose(prompt_ids=prompt_ids))
    return int(controller.propose())
