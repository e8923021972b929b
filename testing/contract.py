"""The controller contract, one function per property, each raising
:class:`ContractViolation` (or whatever the controller raised) when it does not hold.

Properties (what :mod:`sim.pipelines.sync` and :mod:`real` rely on; docs/controllers.md):

1. :func:`proposes_candidates`: ``propose()`` returns a positive int from the declared
   ``candidates`` at every step of a stream, and ``observe`` accepts every step;
2. :func:`survives_extremes`: on edge-case streams neither raises, and the state stays
   JSON with finite numbers (``json.dumps(..., allow_nan=False)``);
3. :func:`restores_exactly`: after ``k`` steps the state goes through JSON into a new
   controller (same seed, as a resumed run builds it), and both then make the same
   decisions and end in the same state;
4. :func:`same_seed_same_decisions`: two controllers of one seed, one stream: the same
   decisions and states;
5. :func:`straggler_rate`: under a stationary law where the straggler probability rises
   with G, a controller that declares ``straggler_budget`` ends (second half of the run)
   with a straggler rate near it (SAGC's constraint ``E[S_t | G] <= delta``, PAPERS.md
   §1; binding, as it is for a utility that grows with G).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from rolloutlab.sim.control.contract import check_candidates
from rolloutlab.sim.control.observation import observe_step, propose_step
from rolloutlab.testing.laws import StepLaw, materialize

Factory = Callable[[int], Any]
"""seed -> a fresh controller."""


class ContractViolation(AssertionError):
    """A controller broke a property of the contract; the message says how."""


def state_json(ctl: Any) -> str:
    """``ctl.state_dict()`` as JSON text (keys sorted). Raises ContractViolation when it
    is not JSON (an object json cannot write, or a NaN/inf number)."""
    try:
        return json.dumps(ctl.state_dict(), allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ContractViolation(f"state_dict() is not JSON: {exc}") from None


def play(
    ctl: Any, laws: Sequence[StepLaw], start: int = 0, timings: list[float] | None = None
) -> list[int]:
    """Run ``ctl`` closed-loop through ``laws`` (steps ``start, start + 1, ...``): propose
    (with the step's prompt ids to a controller that takes them), check G, observe the
    step at that G through :func:`sim.control.observation.observe_step`. Appends the seconds of
    each step's propose + observe to ``timings``. Returns the decisions. Raises
    ContractViolation for a G that is not a positive int among ``ctl.candidates``."""
    cands = set(check_candidates(ctl, type(ctl).__name__))
    decisions, clock = [], 0.0
    for i, law in enumerate(laws):
        step = start + i
        t0 = time.perf_counter()
        try:
            G = propose_step(ctl, law.prompt_ids(step))
        except ValueError as exc:
            raise ContractViolation(f"step {step}: {exc}") from None
        t1 = time.perf_counter()
        if G not in cands:
            raise ContractViolation(
                f"step {step}: proposed G={G}, not in candidates {sorted(cands)}"
            )
        obs = materialize(law, G, step, clock)
        clock = obs["wall_clock_s"]
        t2 = time.perf_counter()
        observe_step(ctl, obs.pop("lengths"), **obs)
        if timings is not None:
            timings.append(time.perf_counter() - t2 + (t1 - t0))
        decisions.append(G)
    return decisions


def proposes_candidates(make: Factory, seed: int, laws: Sequence[StepLaw], timings=None) -> None:
    """Property 1 (module docstring)."""
    play(make(seed), laws, timings=timings)


def survives_extremes(make: Factory, seed: int, laws: Sequence[StepLaw]) -> None:
    """Property 2 (module docstring)."""
    ctl = make(seed)
    play(ctl, laws)
    state_json(ctl)


def restores_exactly(make: Factory, seed: int, example: tuple[Sequence[StepLaw], int]) -> None:
    """Property 3 (module docstring): ``example = (laws, k)``, restore after ``k`` steps."""
    laws, k = example
    k = min(k, len(laws))
    whole = make(seed)
    play(whole, laws[:k])
    saved = state_json(whole)
    restored = make(seed)
    try:
        restored.load_state_dict(json.loads(saved))
    except Exception as exc:
        raise ContractViolation(
            f"load_state_dict(state after {k} steps) raised {type(exc).__name__}: {exc}"
        ) from None
    a, b = play(whole, laws[k:], start=k), play(restored, laws[k:], start=k)
    if a != b:
        i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
        raise ContractViolation(
            f"restored after {k} step(s), decisions diverge at step {k + i}: "
            f"G={a[i]} uninterrupted, G={b[i]} restored"
        )
    if state_json(whole) != state_json(restored):
        raise ContractViolation(f"restored after {k} step(s), the final states differ")


def same_seed_same_decisions(make: Factory, seed: int, laws: Sequence[StepLaw]) -> None:
    """Property 4 (module docstring)."""
    one, two = make(seed), make(seed)
    a, b = play(one, laws), play(two, laws)
    if a != b:
        i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
        raise ContractViolation(f"same seed {seed}, decisions differ at step {i}: {a[i]} vs {b[i]}")
    if state_json(one) != state_json(two):
        raise ContractViolation(f"same seed {seed}, same decisions, different final states")


def straggler_rate(make: Factory, seed: int, steps: int) -> tuple[float, float, str]:
    """Property 5 (module docstring): ``(rate, budget, law)`` of the second half of a
    ``steps``-step run where the ``i``-th smallest of ``n`` candidates straggles with
    probability ``0.05 + 0.85 i / (n - 1)`` (one rollout 1000x the median; otherwise
    every rollout equal). Raises ValueError when the controller declares no budget, has
    one candidate, or a budget outside (0.05, 0.9) (no feasible-and-binding law)."""
    ctl = make(seed)
    budget = getattr(ctl, "straggler_budget", None)
    cands = sorted(check_candidates(ctl, type(ctl).__name__))
    if budget is None:
        raise ValueError("declares no straggler_budget")
    if len(cands) < 2 or not 0.05 < float(budget) < 0.9:
        raise ValueError(f"budget {budget} with candidates {cands}: no law makes it binding")
    p = dict(zip(cands, np.linspace(0.05, 0.9, len(cands))))
    rng = np.random.default_rng(seed)
    quiet = StepLaw("equal", median=100, prompts=2, cap=100_000)
    loud = StepLaw("cap_straggler", median=100, prompts=2, cap=100_000)
    events = []
    for step in range(steps):
        G = propose_step(ctl)
        hit = bool(rng.random() < p[G])
        obs = materialize(loud if hit else quiet, G, step)
        observe_step(ctl, obs.pop("lengths"), **obs)
        events.append(hit)
    law = ", ".join(f"P(straggle | G={g}) = {q:.2f}" for g, q in p.items())
    return float(np.mean(events[steps // 2 :])), float(budget), law
