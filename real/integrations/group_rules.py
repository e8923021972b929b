"""The group sizes a framework can take at a fixed prompt batch ``B``, checked before a step.

A framework fixes how many rollouts one step may generate (its generation budget: TRL's
``generation_batch_size``, the rollouts its memory was sized for) and how a step's
rollouts are cut into equal parts (TRL: ``steps_per_generation`` micro-batches of one
generation; verl: data-parallel ranks and PPO mini-batches). A controller's G that breaks
either is refused before the step starts, naming the value and the rule.
"""

from __future__ import annotations

from collections.abc import Iterable


class GroupSizeError(ValueError):
    """A proposed G the framework cannot take; the message names G, the rule and the step."""


def group_size_problem(
    G: int, prompts: int, budget: int | None, divisors: dict[str, int]
) -> str | None:
    """Why ``B x G`` rollouts cannot be one step, or None when they can.

    ``G``: group size; ``prompts``: ``B``; ``budget``: most rollouts per step (None: no
    budget); ``divisors``: rule name -> the number ``B x G`` must be a multiple of (e.g.
    ``{"steps_per_generation": 2}``). Rules in order: ``G >= 2`` (a group of one has no
    spread to normalise by), ``B x G <= budget``, then each divisor.
    """
    n = prompts * G
    if G < 2:
        return f"G={G}: GRPO needs G >= 2 completions per prompt (a group of one has no spread)"
    if budget is not None and n > budget:
        return (
            f"G={G}: B x G = {prompts} x {G} = {n} rollouts exceeds the generation budget "
            f"of {budget} rollouts per step (G <= {budget // prompts} at B = {prompts})"
        )
    for name, d in divisors.items():
        if n % d:
            return (
                f"G={G}: B x G = {prompts} x {G} = {n} rollouts is not a multiple of "
                f"{name} = {d} (the step's rollouts are cut into equal parts)"
            )
    return None


def check_group_size(
    G: int, prompts: int, budget: int | None, divisors: dict[str, int], where: str
) -> int:
    """``G`` when :func:`group_size_problem` finds nothing; else :class:`GroupSizeError`
    whose message starts with ``where`` (e.g. ``"controller sagc, step 3"``)."""
    problem = group_size_problem(G, prompts, budget, divisors)
    if problem is not None:
        raise GroupSizeError(f"{where}: {problem}")
    return G


def check_candidates(
    candidates: Iterable[int] | None,
    prompts: int,
    budget: int | None,
    divisors: dict[str, int],
    where: str,
) -> None:
    """Refuse, before training starts, a controller whose declared ``candidates`` hold a G
    the framework cannot take (:class:`GroupSizeError`); nothing to check when it declares
    none (each proposal is then checked before its step)."""
    for G in candidates or ():
        check_group_size(int(G), prompts, budget, divisors, f"{where}, candidates")
