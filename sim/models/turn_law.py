"""Turns per rollout: the ``turns`` object of a scenario's ``multi_turn`` block
(docs/multi_turn.md), its laws, draws and JSON parsing.

Laws, as JSON:

- ``{"law": "fixed", "n": N}``: every rollout ``N`` turns;
- ``{"law": "geometric", "mean": m, "max": K, "min": k0}``: geometric on
  ``{k0, k0 + 1, ...}`` (``k0`` default 1) with mean ``m`` before truncation (the chance
  that a turn is the last is ``p = 1 / (m - k0 + 1)``), truncated at ``K``: values above
  ``K`` become ``K``;
- ``{"law": "empirical", "values": [2, 3, 4], "probs": [0.3, 0.4, 0.3]}``: a turn count
  drawn from that table (as ``calibrate turns`` fits it when no geometric law fits).

A draw maps a uniform ``u`` in (0, 1) to a count by the inverse distribution function,
so every draw is keyed on ``(seed, step, prompt, sample)`` through
:func:`sim.models.hashrng.hash_uniform` (the same whatever G, order or pipeline).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from rolloutlab.sim.models.hashrng import hash_uniform
from rolloutlab.sim.trace.field_checks import number

TURN_LAWS = ("fixed", "geometric", "empirical")
_TURN_STREAM = 0x7475726E


@dataclass(frozen=True)
class TurnLaw:
    """Turns per rollout (module docstring): ``fixed`` (always ``max``), ``geometric``
    (``mean``, at least ``min``, at most ``max``) or ``empirical`` (``values`` with
    ``probs``; ``mean``/``max``/``min`` their mean, largest and smallest).

    Raises ValueError naming the field for no turns (``max < 1``, ``mean < min``,
    ``min < 1``, ``min > max``) or a bad table (values not distinct integers >= 1, probs
    not finite, >= 0 and summing to 1)."""

    law: str = "fixed"
    mean: float = 1.0
    max: int = 1
    min: int = 1
    values: tuple[int, ...] = ()
    probs: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.law not in TURN_LAWS:
            raise ValueError(f"field turns.law: expected one of {TURN_LAWS}, got {self.law!r}")
        if self.law == "empirical":
            v, p = np.asarray(self.values), np.asarray(self.probs, dtype=np.float64)
            if v.size == 0 or v.size != p.size or (v < 1).any() or np.unique(v).size != v.size:
                raise ValueError(
                    "field multi_turn.turns.values: expected distinct integers >= 1, one per prob, got "
                    f"{list(self.values)} for {list(self.probs)}"
                )
            if not (np.isfinite(p).all() and (p >= 0).all() and abs(p.sum() - 1) < 1e-6):
                raise ValueError(
                    f"field multi_turn.turns.probs: expected numbers >= 0 summing to 1, got {list(self.probs)}"
                )
            return
        if self.min < 1 or self.max < self.min or not (self.mean >= self.min):
            raise ValueError(
                f"field turns: a rollout needs at least one turn (1 <= min <= max, mean >= "
                f"min), got min={self.min}, max={self.max}, mean={self.mean}"
            )

    def from_uniform(self, u: np.ndarray) -> np.ndarray:
        """int64 turn counts at uniforms ``u`` in (0, 1] (same shape)."""
        u = np.asarray(u, dtype=np.float64)
        if self.law == "fixed":
            return np.full(u.shape, self.max, dtype=np.int64)
        if self.law == "empirical":
            order = np.argsort(self.values)
            cdf = np.cumsum(np.asarray(self.probs)[order])
            i = np.minimum(np.searchsorted(cdf, u * cdf[-1]), len(cdf) - 1)
            return np.asarray(self.values, dtype=np.int64)[order][i]
        if self.mean == self.min:
            return np.full(u.shape, self.min, dtype=np.int64)
        # P(N > k0 + j) = (1 - p)^(j + 1); min 1: exactly 1 / mean
        p = 1.0 / (self.mean if self.min == 1 else self.mean - self.min + 1.0)
        n = self.min + np.floor(np.log(u) / np.log1p(-p)).astype(np.int64)
        return np.minimum(n, self.max)

    def draw(self, seed: int, step: int, prompt_ids: np.ndarray, G: int) -> np.ndarray:
        """``(n_prompts, G)`` int64 turn counts, keyed on ``(seed, step, prompt id, sample)``."""
        if self.law == "fixed":
            return np.full((len(prompt_ids), G), self.max, dtype=np.int64)
        u = hash_uniform(seed, _TURN_STREAM, step, np.asarray(prompt_ids)[:, None], np.arange(G))
        return self.from_uniform(u)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of this law (module docstring)."""
        if self.law == "fixed":
            return {"law": "fixed", "n": self.max}
        if self.law == "empirical":
            return {"law": "empirical", "values": list(self.values), "probs": list(self.probs)}
        return {"law": "geometric", "mean": self.mean, "max": self.max, "min": self.min}


def turn_law_from(t: dict[str, Any]) -> TurnLaw:
    """A :class:`TurnLaw` from the ``turns`` JSON object. Raises ValueError naming the field."""
    law = t.get("law", "fixed")
    if law == "fixed":
        n = number(t.get("n"), "multi_turn.turns.n", integer=True, min=1)
        return TurnLaw("fixed", float(n), n, n)
    if law == "empirical":
        values, probs = t.get("values"), t.get("probs")
        if not isinstance(values, list) or not isinstance(probs, list) or not values:
            raise ValueError("field multi_turn.turns.values / probs: expected two lists")
        v = [number(x, "multi_turn.turns.values", integer=True, min=1) for x in values]
        p = [number(x, "multi_turn.turns.probs", min=0) for x in probs]
        mean = float(np.dot(v, p)) if len(v) == len(p) else 1.0
        return TurnLaw("empirical", mean, max(v), min(v), tuple(v), tuple(p))
    mean = number(t.get("mean"), "multi_turn.turns.mean", min=1)
    k0 = number(t.get("min", 1), "multi_turn.turns.min", integer=True, min=1)
    top = number(t.get("max"), "multi_turn.turns.max", integer=True, min=1)
    return TurnLaw(str(law), mean, top, k0)
