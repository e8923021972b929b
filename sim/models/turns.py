"""Multi-turn (tool-using) rollouts: the turn-count law, the tool-latency law and the
sandbox limits of a scenario's ``multi_turn`` block (docs/multi_turn.md).

A rollout alternates model turns with tool calls: turn ``k`` generates a response (drawn
from the scenario's length model, scaled by ``turn_length_scale``), and, unless it is the
last turn, calls a tool; the tool's output (``tool_output_tokens``) is appended to the
context and the next turn starts when the tool returns. The block, as JSON::

    "multi_turn": {
        "turns": {"law": "geometric", "mean": 3.0, "max": 8}   # or {"law": "fixed", "n": 3}
        "tool_latency": {"law": "lognormal", "min_s": 0.2, "scale_s": 1.5, "sigma": 1.0},
        "sandboxes": 16,            # tool calls running at once (null: unlimited)
        "timeout_s": 30.0,          # per tool call; longer calls end the rollout (tool_timeout)
        "tool_output_tokens": 64,   # tokens a tool returns (the next turn's prefill)
        "turn_length_scale": 0.25   # a turn's length = scale x a length-model draw (>= 1)
    }

Laws. Turns: :mod:`sim.models.turn_law` (``fixed``, ``geometric`` with a minimum and a
maximum, or an ``empirical`` table).
Tool latency: shifted lognormal ``min_s + scale_s * exp(sigma z)``, ``z`` standard normal
(``scale_s`` the median of the excess over ``min_s``; ``scale_s = 0`` a constant
``min_s``) -- the heavy tail reported for code execution and search tools (verl issue
#2873, docs/PAPERS.md). Every draw is keyed on ``(seed, step, prompt, sample, turn)``
(:func:`sim.models.hashrng.hash_uniform`): the same whatever G, order or pipeline.
:func:`fit_tool_latency` fits the law to observed latencies (scipy, maximum likelihood).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from rolloutlab.sim.models.hashrng import hash_uniform
from rolloutlab.sim.models.special import ndtri
from rolloutlab.sim.models.turn_law import TurnLaw, turn_law_from
from rolloutlab.sim.trace.field_checks import number

__all__ = ["MultiTurn", "ToolLatency", "TurnLaw", "fit_tool_latency", "multi_turn_from"]

_TOOL_STREAM, _LENGTH_SEED = 0x746F6F6C, 0x6C656E67


@dataclass(frozen=True)
class ToolLatency:
    """Shifted lognormal tool latency ``min_s + scale_s exp(sigma z)`` (seconds)."""

    min_s: float = 0.0
    scale_s: float = 0.0
    sigma: float = 0.0

    def __post_init__(self) -> None:
        for name in ("min_s", "scale_s", "sigma"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v >= 0):
                raise ValueError(
                    f"field tool_latency.{name}: expected a finite number >= 0, got {v!r}"
                )

    def draw(self, u: np.ndarray) -> np.ndarray:
        """Latencies (s) at uniforms ``u`` in (0, 1) (same shape)."""
        return self.min_s + self.scale_s * np.exp(self.sigma * ndtri(np.asarray(u)))


@dataclass(frozen=True)
class MultiTurn:
    """A scenario's ``multi_turn`` block (module docstring). Raises ValueError naming the
    field for a bad value: no turns, a NaN latency, ``sandboxes`` 0, a timeout below the
    tool's minimum latency."""

    turns: TurnLaw
    tool_latency: ToolLatency
    sandboxes: int | None = None
    timeout_s: float | None = None
    tool_output_tokens: int = 0
    turn_length_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.sandboxes is not None and self.sandboxes < 1:
            raise ValueError(
                f"field multi_turn.sandboxes: expected an integer >= 1 or null, got {self.sandboxes}"
            )
        if self.timeout_s is not None and not (self.timeout_s > self.tool_latency.min_s):
            raise ValueError(
                f"field multi_turn.timeout_s: {self.timeout_s} is not above the tool's minimum "
                f"latency tool_latency.min_s = {self.tool_latency.min_s} (no call could finish)"
            )
        if self.tool_output_tokens < 0 or not (self.turn_length_scale > 0):
            raise ValueError(
                "field multi_turn: need tool_output_tokens >= 0 and turn_length_scale > 0, got "
                f"{self.tool_output_tokens}, {self.turn_length_scale}"
            )

    def turn_lengths(
        self, model: Any, seed: int, step: int, prompt_ids: np.ndarray, G: int, turn: int
    ) -> np.ndarray:
        """``(n_prompts, G)`` response lengths of turn ``turn``: the length model's draw
        (turn 0 with the run's own seed, so a one-turn rollout is the single-turn one;
        turn ``k`` with a seed keyed on ``k``), times ``turn_length_scale``, at least 1."""
        s = seed if turn == 0 else int(hash_uniform(seed, _LENGTH_SEED, turn) * 2**62)
        raw = model.sample_ids(s, step, prompt_ids, G)
        if self.turn_length_scale == 1.0:
            return raw
        cap = model.max_response_length
        scaled = np.maximum(np.rint(raw * self.turn_length_scale), 1).astype(np.int64)
        return np.where(raw >= cap, cap, np.minimum(scaled, cap))

    def latencies(self, seed: int, step: int, prompt_ids: np.ndarray, G: int, turns: int):
        """``(n_prompts, G, turns)`` tool latencies (s) of the calls after each turn."""
        u = hash_uniform(
            seed,
            _TOOL_STREAM,
            step,
            np.asarray(prompt_ids)[:, None, None],
            np.arange(G)[:, None],
            np.arange(turns),
        )
        return self.tool_latency.draw(u)


def multi_turn_from(block: Any) -> MultiTurn:
    """A :class:`MultiTurn` from a scenario's ``multi_turn`` JSON object.

    Raises: ValueError naming the field (``field multi_turn.<name>: ...``)."""
    if not isinstance(block, dict):
        raise ValueError("field 'multi_turn': must be an object")
    t = block.get("turns", {"law": "fixed", "n": 1})
    lat = block.get("tool_latency", {"law": "lognormal"})
    if not isinstance(t, dict) or not isinstance(lat, dict):
        raise ValueError("field multi_turn.turns / multi_turn.tool_latency: must be objects")
    turns = turn_law_from(t)
    if lat.get("law", "lognormal") != "lognormal":
        raise ValueError(
            f"field multi_turn.tool_latency.law: expected 'lognormal', got {lat['law']!r}"
        )
    latency = ToolLatency(
        *(
            number(lat.get(k, 0.0), f"multi_turn.tool_latency.{k}", min=0)
            for k in ("min_s", "scale_s", "sigma")
        )
    )
    sandboxes = block.get("sandboxes")
    timeout = block.get("timeout_s")
    return MultiTurn(
        turns=turns,
        tool_latency=latency,
        sandboxes=None if sandboxes is None else number(sandboxes, "multi_turn.sandboxes", integer=True, min=1),
        timeout_s=None if timeout is None else number(timeout, "multi_turn.timeout_s", min=0, min_open=True),
        tool_output_tokens=number(block.get("tool_output_tokens", 0), "multi_turn.tool_output_tokens", integer=True, min=0),
        turn_length_scale=number(block.get("turn_length_scale", 1.0), "multi_turn.turn_length_scale", min=0, min_open=True),
    )  # fmt: skip


def fit_tool_latency(latencies_s: np.ndarray, censor_s: float | None = None) -> ToolLatency:
    """Maximum-likelihood shifted lognormal of observed tool latencies (s).

    Profile likelihood over the shift: for each ``min_s`` on a grid of 40 points (16 with
    censoring, each a numerical fit) in
    ``[0, 0.99 min(x)]`` (the likelihood is unbounded as the shift reaches the smallest
    value, hence the guard), ``sigma`` and ``scale_s`` are ``scipy.stats.lognorm.fit`` with
    ``floc=min_s`` (closed form: mean and standard deviation of ``log(x - min_s)``; with ``censor_s``, calls killed at a timeout, the values
    ``>= censor_s`` enter right-censored through ``scipy.stats.CensoredData``); the grid
    point of largest log-likelihood wins. Raises ValueError for fewer than 3 values or a
    non-finite or negative one."""
    from scipy import stats  # why: at call (~0.3 s import), only fits need it

    x = np.asarray(latencies_s, dtype=np.float64)
    if x.size < 3 or not np.isfinite(x).all() or (x < 0).any():
        raise ValueError(f"tool latencies: need >= 3 finite values >= 0, got {x.size} values")
    if np.ptp(x) == 0:
        return ToolLatency(float(x[0]), 0.0, 0.0)
    c = np.inf if censor_s is None else float(censor_s)
    cens = bool((x >= c).any())
    done, right = x[x < c], x[x >= c]
    best = (-np.inf, ToolLatency())
    for loc in np.linspace(0.0, 0.99 * float(x.min()), 16 if cens else 40):
        if cens:
            data = stats.CensoredData(uncensored=done, right=right)
            sigma, _, scale = stats.lognorm.fit(data, floc=loc)
        else:  # the closed form scipy's fit computes with floc, without its overhead
            logs = np.log(x - loc)
            sigma, scale = float(logs.std()), float(np.exp(logs.mean()))
        ll = stats.lognorm.logpdf(done, sigma, loc, scale).sum()
        ll += stats.lognorm.logsf(right, sigma, loc, scale).sum()
        if ll > best[0]:
            best = (ll, ToolLatency(float(loc), float(scale), float(sigma)))
    return best[1]
