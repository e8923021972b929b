"""``rolloutlab advise``'s neighbour polish: coordinate descent from the search's answer.

A sampled search (:func:`.search.search`) can stop next to a faster setting it never
asked for. The polish walks from its answer: each round prices every setting one grid
step away in one knob (:func:`.caveats.neighbours` with ``reach=1``; a knob's grid is its
searched values in the order given) that no trial priced yet, and moves to the fastest
feasible neighbour when it beats the current setting by more than the tie rule's
threshold (``max(run-to-run spread, TIE_FLOOR)``, :mod:`.caveats`). It stops when no
neighbour wins, after :data:`POLISH_ROUNDS` rounds, or when ``budget`` settings have been
priced (a round cut short by the budget prices its neighbours in the space's knob order).

Every setting the polish prices is a row of the trials table (``origin`` ``polish``) and
the answer is again the fastest feasible row (:func:`.search.finish`): at least as good
as every setting priced before the tie check. A neighbour faster by less than the
threshold can so be the answer; the walk does not go on from it (a tie).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl
from rolloutlab.analysis.advise.caveats import neighbours
from rolloutlab.analysis.advise.search import Constraints, SearchSpace, finish, trial_row

POLISH_ROUNDS = 3
"""Rounds of the walk at most: each round costs up to two settings per knob, and a
sampled search that landed more than three steps from a better setting is better
served by more ``--trials``."""


def default_budget(knobs: int) -> int:
    """Settings the polish may price by default: two per searched knob (one grid step
    down and up) for each of :data:`POLISH_ROUNDS` rounds."""
    return 2 * knobs * POLISH_ROUNDS


@dataclass(frozen=True)
class Polish:
    """What :func:`polish` did."""

    table: pl.DataFrame
    """The search's table with the polish's rows (``origin`` ``polish``), ``pareto`` and
    ``best`` marked over all of them."""
    trials: int
    """Settings the polish priced."""
    rounds: int
    """Rounds that priced at least one setting."""
    budget: int
    start: dict[str, Any] | None
    """The search's answer (None: no feasible trial, nothing polished)."""
    end: dict[str, Any] | None
    """The answer after the polish."""
    start_s: float | None
    end_s: float | None
    """Their objective (s, or GPU-hours)."""
    threshold: float
    """A neighbour must be faster by more than this fraction to move the walk."""

    @property
    def moved(self) -> bool:
        """The polish changed the answer."""
        return self.start != self.end

    def line(self, unit: str = "s") -> str:
        """The polish in words, printed above the answer's caveats."""
        head = (
            f"polish: {self.trials} single-knob neighbours priced in {self.rounds} round(s) "
            f"(budget {self.budget})"
        )
        if self.start is None or self.end is None or self.start_s is None or self.end_s is None:
            return f"{head}; no feasible trial to start from"
        if not self.moved:
            return (
                f"{head}; the answer did not move: no neighbour faster by more than "
                f"{self.threshold:.1%}"
            )
        changed = ", ".join(
            f"{k} {_fmt(self.start[k])} -> {_fmt(self.end[k])}"
            for k in self.start
            if self.start[k] != self.end[k]
        )
        gap = self.end_s / self.start_s - 1
        tie = f", a tie: within {self.threshold:.1%}" if abs(gap) <= self.threshold else ""
        return (
            f"{head}; the answer moved from the search's ({self.start_s:,.4g} {unit}): "
            f"{changed} ({gap:+.1%}{tie})"
        )


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _key(setting: dict) -> str:
    return json.dumps(setting, sort_keys=True)


def polish(
    table: pl.DataFrame,
    space: SearchSpace,
    constraints: Constraints,
    run_batch: Callable[[list[dict]], Sequence[dict | None]],
    threshold: float,
    budget: int,
    *,
    use_target: bool = True,
    objective: str = "time",
    gpus: Callable[[dict], int] | None = None,
    rounds: int = POLISH_ROUNDS,
) -> Polish:
    """Walk from ``table``'s answer (module docstring). ``table``: :func:`.search.search`'s;
    ``run_batch(settings)``: one metrics dict (or one with ``error``, or None) per setting,
    as for the search; ``threshold``: the fraction a neighbour must win by to move the walk;
    ``budget``: settings priced at most (0: nothing is priced). Rows gain ``origin``
    (``search`` or ``polish``); polished trials are numbered after the search's. Raises
    ValueError on a negative budget or threshold."""
    if budget < 0 or threshold < 0:
        raise ValueError(
            f"advise polish: need a budget and threshold >= 0, got {budget}, {threshold}"
        )
    column = "gpu_hours" if objective == "gpu-hours" else "time_s"
    if "origin" not in table.columns:
        table = table.with_columns(pl.lit("search").alias("origin"))
    best = table.filter("best")
    if not best.height:
        return Polish(table, 0, 0, budget, None, None, None, None, threshold)
    keys = space.keys
    rows = table.drop("pareto", "best").to_dicts()
    known = {_key({k: r[k] for k in keys}): r for r in rows}
    pruned = constraints.prune(space)  # the search never tries workers over the budget
    varied = {k: tuple(getattr(pruned, k)) for k in keys if len(getattr(pruned, k)) > 1}
    row = best.row(0, named=True)
    start = {k: row[k] for k in keys}
    current, current_s = start, float(row[column])
    number = int(table["trial"].max()) + 1
    spent = done = 0
    while done < rounds and spent < budget:
        near = [s for _, s in neighbours(current, varied, reach=1)]
        todo = list({_key(s): s for s in near if _key(s) not in known}.values())
        todo = todo[: budget - spent]
        if not todo:
            break
        for s, m in zip(todo, run_batch(todo)):
            r, _, _ = trial_row(
                number, s, m or {"error": "no result"}, constraints, use_target, objective, gpus
            )
            rows.append({**r, "origin": "polish"})
            known[_key(s)] = rows[-1]
            number += 1
        spent, done = spent + len(todo), done + 1
        priced = [known[_key(s)] for s in near if _key(s) in known]
        feasible = [r for r in priced if r["feasible"] and r.get(column) is not None]
        if not feasible:
            break
        winner = min(feasible, key=lambda r: float(r[column]))
        if not float(winner[column]) < current_s * (1 - threshold):
            break
        current, current_s = {k: winner[k] for k in keys}, float(winner[column])
    out = finish(rows, keys, objective)
    end = out.filter("best").row(0, named=True)
    return Polish(
        out,
        spent,
        done,
        budget,
        start,
        {k: end[k] for k in keys},
        float(row[column]),
        float(end[column]),
        threshold,
    )
