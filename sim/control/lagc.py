"""LAGC: Learning-Aware Group Control, a group-size controller beside SAGC.

SAGC (PAPERS.md §1) maximises ``u(G) = log2 G`` under a straggler-rate constraint. LAGC
keeps SAGC's constraint machinery -- the per-G Beta posteriors of the straggler
probability, the dual variable and the local Thompson-sampling step -- by composition (it
owns a :class:`rolloutlab.sim.control.controllers.SAGC` and calls its ``observe`` and ``choose``),
and replaces the utility with the expected learning signal per second::

    u(G) = log2( sum_i s(a_i, b_i, G) / T(G) )

- ``s``: :func:`sim.control.lagc_model.expected_signal` of prompt ``i`` of the next batch, with a
  ``Beta(a_i, b_i)`` belief of its pass rate: the population Beta
  (:func:`sim.control.lagc_model.population_beta`, from the recent steps' rewards) updated with the
  prompt's own earlier rewards when it recurs (dataset epochs) and the next batch's
  prompt ids are given to :meth:`LAGC.propose` -- the prompt-aware prior that the SAGC
  paper names as future work; otherwise ``B`` copies of the population Beta.
- ``T(G) = spt_G * E[max of B G lengths] + c0 + c1 * B G * mean length``: generation waits
  for the step's longest rollout (SAGC's premise) at ``spt_G`` seconds per token of the
  longest rollout (observed ``gen_time_s / max L`` at that G, or at the nearest observed
  G); the rest of the step (``step_time_s - gen_time_s``: update, sync) is a constant plus
  a per-token cost (as ``learner_step_s`` in :mod:`sim.models.cost`), ``(c0, c1)`` a least-squares
  line through the per-G averages of (response tokens, rest time); a constant while only
  one G was seen (:meth:`LAGC.rest_line`). Without ``gen_time_s``, ``spt = 1`` (time in tokens).

With ``signal="variance"`` (the default, :mod:`sim.models.learning`'s signal) ``s = E[p_i(1-p_i)]
(1 - 1/G)``: the pass rates scale every G alike, so they decide only whether there is any
signal, and the choice is ``argmax (1 - 1/G) / T(G)``; with ``signal="informative"`` the
pass rates (and the per-prompt beliefs) also shape it (extreme p favour larger G).

When ``s = 0`` at every candidate (every pass rate is 0 or 1: no group can be
informative), ``u(G) = -log2 T(G)``: time decides, so G falls to the smallest candidate.
Until the first rewards are seen (``rewards=None``), ``u(G) = log2 G`` and LAGC makes
exactly SAGC's proposals. Rewards are clipped to [0, 1] and count as fractional
successes (exact for verifiable 0/1 rewards).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from rolloutlab.sim.control.controllers import SAGC
from rolloutlab.sim.control.lagc_model import SIGNALS, LengthPool, expected_signal, population_beta


class LAGC:
    """Learning-aware group-size controller (module docstring; docs/controllers.md).

    ``signal``: ``"variance"`` (default, the signal of :mod:`sim.models.learning`) or
    ``"informative"`` (:func:`sim.control.lagc_model.expected_signal`).
    ``pop_gamma``: per-step forgetting of the population reward statistics (memory
    ``1/(1-pop_gamma)`` steps: pass rates move as the policy learns). ``prompt_decay``:
    weight kept by a prompt's earlier rewards each time it recurs. ``length_gamma``:
    forgetting of the length pool and of the time rates. ``max_prompts``: prompts
    remembered (least recently seen dropped first; the state stays bounded).
    ``c_max``: cap on the population Beta's concentration. ``sagc_options``: keyword
    arguments of :class:`sim.control.controllers.SAGC` (``candidates, tau, delta, eta_lambda,
    gamma, radius, init_G, G_min, step_time_budget_s, ...``). Raises ValueError on a bad
    option (the SAGC ones as SAGC does).
    """

    observes = ("rewards", "prompt_ids", "gen_time_s", "step_time_s")
    proposes = ("prompt_ids",)

    def __init__(
        self,
        signal: str = "variance",
        pop_gamma: float = 0.9,
        prompt_decay: float = 0.5,
        length_gamma: float = 0.9,
        max_prompts: int = 1024,
        c_max: float = 1e6,
        seed: int = 0,
        name: str = "lagc",
        **sagc_options: Any,
    ):
        if signal not in SIGNALS:
            raise ValueError(f"LAGC: signal must be one of {SIGNALS}, got {signal!r}")
        for key, val in (("pop_gamma", pop_gamma), ("length_gamma", length_gamma)):
            if not 0.0 < val <= 1.0:
                raise ValueError(f"LAGC: {key} must be in (0, 1], got {val}")
        if not 0.0 <= prompt_decay <= 1.0:
            raise ValueError(f"LAGC: prompt_decay must be in [0, 1], got {prompt_decay}")
        if max_prompts < 0 or not c_max > 0:
            raise ValueError("LAGC: need max_prompts >= 0 and c_max > 0")
        self.signal, self.pop_gamma, self.prompt_decay = signal, pop_gamma, prompt_decay
        self.max_prompts, self.c_max, self.name = int(max_prompts), float(c_max), name
        self.sagc = SAGC(seed=seed, **sagc_options)
        self.lengths = LengthPool(gamma=length_gamma)
        self.pop = {"reward": 0.0, "samples": 0.0, "var": 0.0, "groups": 0.0}
        self.prompts: dict[int, list[float]] = {}  # id -> [successes, trials], by recency
        self.spt: dict[int, float] = {}  # G -> seconds per token of the longest rollout
        self.rest: dict[int, list[float]] = {}  # G -> [rest of the step (s), tokens]
        self.n_prompts = 0

    @property
    def candidates(self) -> tuple[int, ...]:
        """The inner SAGC's candidates (ascending, ``>= G_min``)."""
        return tuple(self.sagc.candidates)

    @property
    def straggler_budget(self) -> float:
        """The inner SAGC's target straggler rate ``delta`` (its constraint is LAGC's)."""
        return self.sagc.delta

    @property
    def current(self) -> int:
        """The last proposed G."""
        return self.sagc.current

    @property
    def steps_observed(self) -> int:
        """Steps observed (restored by :meth:`load_state_dict`)."""
        return self.sagc.steps_observed

    # -- predictions --------------------------------------------------------------------
    def belief(self, prompt_ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(a, b)``: (n,) Beta beliefs of the pass rates of the next batch's prompts
        (``prompt_ids``, or ``B`` prompts of the population when None). Raises
        ValueError before any reward was observed."""
        if self.pop["samples"] <= 0:
            raise ValueError("LAGC.belief: no rewards observed yet")
        m = self.pop["reward"] / self.pop["samples"]
        v = self.pop["var"] / self.pop["groups"] if self.pop["groups"] > 0 else None
        a0, b0 = population_beta(min(max(m, 0.0), 1.0), v, self.c_max)
        if prompt_ids is None:
            B = max(self.n_prompts, 1)
            return np.full(B, a0), np.full(B, b0)
        seen = [self.prompts.get(int(i), (0.0, 0.0)) for i in np.asarray(prompt_ids).ravel()]
        k = np.array([s[0] for s in seen], dtype=np.float64)
        n = np.array([s[1] for s in seen], dtype=np.float64)
        return a0 + k, b0 + n - k

    def step_time(self, G: int, n_prompts: int | None = None) -> float:
        """Predicted step time at ``G`` (s; tokens when no time was observed): module
        docstring. Raises ValueError before any lengths were observed."""
        B = n_prompts or max(self.n_prompts, 1)
        if self.spt:
            nearest = min(self.spt, key=lambda g: (abs(math.log2(g / G)), g))
            spt = self.spt[nearest]
        else:
            spt = 1.0
        t = spt * self.lengths.expected_max(B * G)
        if self.rest:
            c0, c1 = self.rest_line()
            t += c0 + c1 * B * G * self.lengths.mean()
        return t

    def rest_line(self) -> tuple[float, float]:
        """``(c0 s, c1 s/token)`` of the non-generation time: least squares through the
        per-G (tokens, seconds) averages, both >= 0 (``c1 < 0``: the mean as a constant;
        ``c0 < 0``: through the origin). With one G seen, a constant (optimistic about
        larger G, so the local search tries a neighbour and the line gets its second
        point; pessimism would never leave the first G). Raises ValueError before any step
        time was observed."""
        if not self.rest:
            raise ValueError("LAGC.rest_line: no step time observed yet")
        rest, tok = (np.array([v[i] for v in self.rest.values()]) for i in (0, 1))
        if len(tok) < 2 or np.ptp(tok) <= 0:
            return float(rest.mean()), 0.0
        c1, c0 = np.polyfit(tok, rest, 1)
        if c1 < 0:
            return float(rest.mean()), 0.0
        if c0 < 0:
            return 0.0, float(rest @ tok / (tok @ tok))
        return float(c0), float(c1)

    def utilities(self, prompt_ids: np.ndarray | None = None) -> dict[int, float]:
        """``u(G)`` for every candidate (module docstring); ``-inf`` where the signal is 0
        but not everywhere. ``log2 G`` (SAGC's) before any reward was observed."""
        if self.pop["samples"] <= 0:
            return {g: math.log2(g) for g in self.candidates}
        a, b = self.belief(prompt_ids)
        B = len(a)
        sig = {g: float(expected_signal(a, b, g, self.signal).sum()) for g in self.candidates}
        time = {g: self.step_time(g, B) for g in self.candidates}
        if all(s <= 0.0 for s in sig.values()):
            return {g: -math.log2(time[g]) for g in self.candidates}
        return {g: math.log2(sig[g] / time[g]) if sig[g] > 0 else -math.inf for g in sig}

    # -- controller protocol --------------------------------------------------------------
    def propose(self, prompt_ids: np.ndarray | None = None) -> int:
        """G for the next step: SAGC's local primal step (:meth:`SAGC.choose`) with the
        utility :meth:`utilities`; ``prompt_ids`` ((B,) ints), when the pipeline knows the
        next batch, makes the signal prompt-aware."""
        u = self.utilities(prompt_ids)
        return self.sagc.choose(u.__getitem__)

    def explain(self) -> dict[str, Any]:
        """The last decision explained (:meth:`SAGC.explain`; scores use the
        learning-signal utility)."""
        return {"utility": "learning signal / step time", **self.sagc.explain()}

    def observe(
        self,
        lengths: Sequence[Sequence[int]],
        rewards: Any = None,
        prompt_ids: Any = None,
        gen_time_s: float | None = None,
        step_time_s: float | None = None,
    ) -> None:
        """Take one step: ``lengths`` (n_prompts, G) tokens; optional ``rewards``
        (n_prompts, G) floats, ``prompt_ids`` (n_prompts,) ints, ``gen_time_s`` and
        ``step_time_s`` (s), as :func:`sim.control.observation.observe_step` passes them.
        Raises ValueError for empty lengths (as SAGC) or rewards whose shape differs."""
        groups = [np.asarray(g, dtype=np.float64).ravel() for g in lengths]
        rows = None if rewards is None else _reward_rows(groups, rewards)
        self.sagc.observe(lengths, gen_time_s=gen_time_s, step_time_s=step_time_s)
        flat = np.concatenate(groups)
        self.n_prompts = len(groups)
        self.lengths.add(flat)
        if gen_time_s is not None and flat.max() > 0:
            sizes = {len(g) for g in groups}
            g = sizes.pop() if len(sizes) == 1 else self.sagc.current
            gamma = self.lengths.gamma
            self.spt[g] = _ema(self.spt.get(g), float(gen_time_s) / float(flat.max()), gamma)
            if step_time_s is not None:
                rest = max(float(step_time_s) - float(gen_time_s), 0.0)
                old = self.rest.get(g)
                self.rest[g] = [
                    _ema(None if old is None else old[0], rest, gamma),
                    _ema(None if old is None else old[1], float(flat.sum()), gamma),
                ]
        if rows is not None:
            self._observe_rewards(rows, prompt_ids)

    def _observe_rewards(self, rows: list[np.ndarray], prompt_ids: Any) -> None:
        for key in self.pop:
            self.pop[key] *= self.pop_gamma
        self.pop["reward"] += float(sum(r.sum() for r in rows))
        self.pop["samples"] += float(sum(len(r) for r in rows))
        pairs = [r for r in rows if len(r) >= 2]
        self.pop["var"] += float(sum(r.var(ddof=1) for r in pairs))
        self.pop["groups"] += float(len(pairs))
        if prompt_ids is None or self.max_prompts == 0:
            return
        for pid, r in zip(np.asarray(prompt_ids).ravel().tolist(), rows):
            k, n = self.prompts.pop(int(pid), (0.0, 0.0))
            d = self.prompt_decay
            self.prompts[int(pid)] = [d * k + float(r.sum()), d * n + float(len(r))]
        while len(self.prompts) > self.max_prompts:
            del self.prompts[next(iter(self.prompts))]

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state: the step count (as every controller's), the inner
        SAGC's state, the reward statistics, per-prompt counts (in recency order), the
        length pool and the time rates."""
        return {
            "kind": "lagc",
            "steps_observed": self.sagc.steps_observed,
            "sagc": self.sagc.state_dict(),
            "pop": dict(self.pop),
            "prompts": {str(k): v for k, v in self.prompts.items()},
            "lengths": self.lengths.to_dict(),
            "spt": {str(g): v for g, v in self.spt.items()},
            "rest": {str(g): v for g, v in self.rest.items()},
            "n_prompts": self.n_prompts,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output. Raises ValueError for another kind or
        candidate set."""
        if state.get("kind") != "lagc":
            raise ValueError(f"LAGC: cannot load state of kind {state.get('kind')!r}")
        self.sagc.load_state_dict(state["sagc"])
        self.pop = {k: float(v) for k, v in state["pop"].items()}
        self.prompts = {int(k): [float(x) for x in v] for k, v in state["prompts"].items()}
        self.lengths.load(state["lengths"])
        self.spt = {int(g): float(v) for g, v in state["spt"].items()}
        self.rest = {int(g): [float(x) for x in v] for g, v in state["rest"].items()}
        self.n_prompts = int(state["n_prompts"])


def _ema(old: float | None, new: float, gamma: float) -> float:
    """``gamma old + (1 - gamma) new``, or ``new`` for the first value."""
    return new if old is None else gamma * old + (1.0 - gamma) * new


def _reward_rows(groups: list[np.ndarray], rewards: Any) -> list[np.ndarray]:
    """Rewards as one clipped [0, 1] row per group; ValueError unless shaped as lengths."""
    rows = [np.clip(np.asarray(r, dtype=np.float64).ravel(), 0.0, 1.0) for r in rewards]
    if len(rows) != len(groups) or any(len(r) != len(g) for r, g in zip(rows, groups)):
        raise ValueError("LAGC.observe: rewards must have the shape of lengths (n_prompts, G)")
    if any(np.isnan(r).any() for r in rows):
        raise ValueError("LAGC.observe: rewards contain NaN")
    return rows
