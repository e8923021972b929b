"""The option types every command declares its options with: one place that decides what
a valid number, count, probability or list is (one validation layer).

Each type is a :class:`click.ParamType`, so a bad value is click's usage error: one line
naming the option, exit code 2, before the command body runs (nothing written).

- :func:`finite` — a float that must be finite (``nan``/``inf`` refused; click's
  ``FloatRange`` lets ``nan`` through its bounds), optionally within a range;
- :data:`POSITIVE_INT`, :data:`NON_NEGATIVE_INT`, :data:`PROBABILITY`, :data:`POSITIVE`;
- :data:`STEPS`, :data:`PROMPTS`, :data:`WORKERS` — counts with an upper bound named in
  the error;
- :class:`CommaList` — ``"1,2,4"`` as a list of an item type, items unique by default;
- :data:`SEED_COUNT` — ``--seeds N``: the number of seeds (``0..N-1``) in every command.
"""

from __future__ import annotations

import math
from typing import Any

import click


class FiniteFloat(click.FloatRange):
    """A finite float within optional bounds (``min``/``max``, open with ``min_open`` /
    ``max_open``): ``nan``, ``inf`` and ``-inf`` are refused naming the option."""

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None):
        """The float, or click's usage error (exit 2) naming ``param``."""
        if isinstance(value, float) and math.isfinite(value):
            return super().convert(value, param, ctx)
        v = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(v):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(v, param, ctx)


def finite(
    min: float | None = None,
    max: float | None = None,
    *,
    min_open: bool = False,
    max_open: bool = False,
) -> FiniteFloat:
    """A :class:`FiniteFloat` with these bounds (None: unbounded on that side)."""
    return FiniteFloat(min=min, max=max, min_open=min_open, max_open=max_open)


FINITE = finite()
"""Any finite float."""
POSITIVE = finite(0.0, min_open=True)
"""A finite float > 0 (a learning rate, a time)."""
PROBABILITY = finite(0.0, 1.0)
"""A finite float in [0, 1]."""
POSITIVE_INT = click.IntRange(min=1)
"""An integer >= 1 (a count: steps, prompts, workers, slots)."""
MAX_STEPS = 1_000_000
"""Most learner steps one run may ask for (a month of 2.6 s steps; the scenarios' runs
are 60-300): beyond it a typo, not a study."""
MAX_PROMPTS = 100_000
"""Most prompts per step B (verl's largest published batches are a few thousand)."""
MAX_WORKERS = 100_000
"""Most generation workers (a 100k-GPU cluster at TP 1)."""
STEPS = click.IntRange(1, MAX_STEPS)
"""Learner steps: an integer in [1, :data:`MAX_STEPS`]; a larger one is refused naming the
limit (``--steps 99999999999999999999999`` would otherwise run until killed)."""
PROMPTS = click.IntRange(1, MAX_PROMPTS)
"""Prompts per step B: an integer in [1, :data:`MAX_PROMPTS`]."""
WORKERS = click.IntRange(1, MAX_WORKERS)
"""Generation workers: an integer in [1, :data:`MAX_WORKERS`]."""
NON_NEGATIVE_INT = click.IntRange(min=0)
"""An integer >= 0 (0 meaning none/unlimited, as each option's help says)."""


class CommaList(click.ParamType):
    """A comma-separated list (``"1,2, 4"``) whose items are converted by ``item`` (a
    click type) — so each item is range- and finiteness-checked like a single value —
    refused when empty or, with ``unique`` (the default), when an item repeats (a grid
    with ``--S 1,1`` would run every point twice)."""

    def __init__(self, item: click.ParamType, unique: bool = True, metavar: str = "X[,X...]"):
        self.item = item
        self.unique = unique
        self.metavar = metavar
        self.name = f"list of {item.name}"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        """``X[,X...]`` (or the ``metavar`` given) in ``--help``."""
        return self.metavar

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None):
        """The list, or click's usage error (exit 2) naming ``param`` and the bad item."""
        if isinstance(value, list):
            return value
        items = [x.strip() for x in str(value).split(",") if x.strip()]
        if not items:
            self.fail(f"expected a comma-separated list, got {value!r}.", param, ctx)
        out = []
        for x in items:
            try:
                out.append(self.item.convert(x, param, ctx))
            except click.BadParameter as exc:
                self.fail(f"item {x!r}: {exc.message}", param, ctx)
        if self.unique:
            dup = sorted({str(x) for i, x in enumerate(items) if out[i] in out[:i]})
            if dup:
                self.fail(f"repeated item(s) {', '.join(dup)} in {value!r}.", param, ctx)
        return out


SEED_COUNT = POSITIVE_INT
"""``--seeds N``: how many seeds (``0..N-1``) — the one meaning of ``--seeds`` in every
command (``rolloutlab sweep --seed-list`` takes explicit seeds)."""
