"""Group-size controllers: the object that picks G for the next training step.

The same objects drive the simulator (:mod:`sim.pipelines.sync`) and the real runners
(:mod:`real`); what they must offer is :mod:`sim.control.contract`.

:class:`StaticG` is the fixed-G baseline. :class:`SAGC` is Straggler-Aware Group
Control (Khan et al., 2026; PAPERS.md §1): online primal-dual + Thompson sampling
maximising ``log2 G`` subject to a straggler-rate constraint ``E[S_t | G] <= delta``
(optional floor ``G_min`` and step-time budget). :class:`sim.control.lagc.LAGC` builds on SAGC
with a learning-signal utility; CLI specs are parsed in :mod:`sim.control.spec`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rolloutlab.sim.control.length_history import LengthHistory
from rolloutlab.sim.trace.metrics import READINGS, straggler_reading


def _check_lengths(lengths: Sequence[Sequence[int]]) -> None:
    if isinstance(lengths, np.ndarray):  # (n_prompts, G) from the fast path: no per-row loop
        if lengths.size == 0:
            raise ValueError("observe: got no response lengths")
        return
    if len(lengths) == 0 or all(len(g) == 0 for g in lengths):
        raise ValueError("observe: got no response lengths")


class StaticG:
    """A fixed group size: ``propose()`` always returns ``G``; ``observe`` only counts.

    Raises ValueError if ``G < 1``.
    """

    def __init__(self, G: int):
        if int(G) < 1:
            raise ValueError(f"StaticG: G must be >= 1, got {G}")
        self.G = int(G)
        self.name = f"static:{self.G}"
        self.steps_observed = 0

    @property
    def candidates(self) -> tuple[int, ...]:
        """The one G it proposes (the declared candidates of the controller contract)."""
        return (self.G,)

    def propose(self) -> int:
        """The fixed G."""
        return self.G

    def explain(self) -> dict[str, Any]:
        """Why the last G (the contract's optional ``explain``): it is fixed."""
        return {"G": self.G, "why": "static"}

    def observe(self, lengths: Sequence[Sequence[int]]) -> None:
        """Check the lengths and count the step; G does not depend on them."""
        _check_lengths(lengths)
        self.steps_observed += 1

    def state_dict(self) -> dict[str, Any]:
        """JSON state: G and the steps seen (:meth:`load_state_dict` restores it)."""
        return {"kind": "static", "G": self.G, "steps_observed": self.steps_observed}

    def observe_steps(self, lengths: np.ndarray) -> list[str]:
        """Observe ``T`` steps in one call (open loop: G never depends on what it sees).

        ``lengths``: (T, n_prompts, G) response tokens. Returns the ``T`` states after
        each step as ``json.dumps(state_dict())`` strings, the same as ``observe`` then
        ``state_dict`` step by step (why: the fast path times blocks of steps, and one
        ``json.dumps`` per step was a quarter of its run time). Raises ValueError for an
        array that is not 3-d or has an empty step.
        """
        lengths = np.asarray(lengths)
        if lengths.ndim != 3 or lengths.shape[1] * lengths.shape[2] == 0:
            raise ValueError(
                f"observe_steps: need (T, n_prompts, G) lengths, got shape {lengths.shape}"
            )
        first = self.steps_observed + 1
        self.steps_observed += len(lengths)
        head, tail = json.dumps({**self.state_dict(), "steps_observed": "@"}).split('"@"')
        return [f"{head}{k}{tail}" for k in range(first, self.steps_observed + 1)]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict` output."""
        if state.get("kind") != "static" or int(state["G"]) != self.G:
            raise ValueError(f"StaticG({self.G}): cannot load state {state}")
        self.steps_observed = int(state["steps_observed"])


@dataclass
class SAGC:
    """Straggler-Aware Group Control (PAPERS.md §1, Khan et al. 2026).

    Each step: ``S_t = 1[max(L)/median(L) > tau]`` over all rollouts of the step
    (:func:`sim.trace.metrics.straggler_ratio`); the chosen G's posterior
    ``Beta(alpha_G, beta_G)`` is updated with forgetting; the dual variable follows
    projected dual ascent ``lambda <- max(0, lambda + eta_lambda (S_t - delta))``.
    ``propose`` draws ``p~_G ~ Beta(alpha_G, beta_G)`` for each candidate within
    ``radius`` positions of the current G (local search) and returns
    ``argmax u(G) - lambda p~_G`` with ``u(G) = log2 G``.

    Defaults (chosen so the controller adapts within a few hundred steps):
    """

    candidates: Sequence[int] = (4, 8, 16)
    """Group sizes allowed, sorted ascending on init. The paper's static baselines."""
    tau: float = 4.0
    """Straggler threshold on max/median of the step's response lengths. 4 separates
    G=4 from G=16 in the bundled scenarios (docs/controllers.md)."""
    delta: float = 0.3
    """Target long-run straggler rate. Not given by the paper; 0.3 is between the
    straggler rates of the smallest and largest candidate in the bundled scenarios."""
    eta_lambda: float = 0.1
    """Dual step size (not given by the paper). With log2-utility gaps of 1 between
    doubling candidates, lambda crosses 1-3 within ~10-40 steps of violation."""
    gamma: float = 0.98
    """Forgetting factor of the Beta posteriors: an effective memory of
    ``1/(1-gamma)`` = 50 observations, for non-stationary (growing) lengths."""
    prior: tuple[float, float] = (1.0, 1.0)
    """Beta prior ``(alpha0, beta0)``: uniform on the straggler probability."""
    prior_p: tuple[float, ...] | None = None
    """Prior straggler probability of each candidate G (ascending candidates, before
    ``G_min``), e.g. a length model's forecast of ``P(max/median > tau)`` at each G:
    candidate G starts at (and, with ``forget="to_prior"``, decays toward)
    ``Beta(alpha0 + prior_n p_G, beta0 + prior_n (1 - p_G))``. None: ``prior`` for all."""
    prior_n: float = 10.0
    """Weight of ``prior_p`` in pseudo-steps (an effective memory of ``1/(1-gamma)`` = 50
    observed steps outweighs 10)."""
    forget: str = "chosen"
    """``"chosen"``: ``alpha_G <- gamma alpha_G + S_t`` and ``beta_G <- gamma beta_G + 1 - S_t``
    for the chosen G only (PAPERS.md's natural form). ``"to_prior"``: in addition every
    candidate decays toward the prior, ``a <- gamma a + (1 - gamma) a0``, so an unused G
    regains uncertainty and is re-explored."""
    radius: int = 1
    """Local search: G moves at most this many positions in the sorted candidates."""
    init_G: int | None = None
    """Starting G; default the middle candidate."""
    G_min: int | None = None
    """Floor on G: candidates below it are dropped on init, so G is never proposed below
    it. None (default): no floor. Raises ValueError if no candidate is left."""
    step_time_budget_s: float | None = None
    """Step-time budget (s). When set, a step whose observed time (``step_time_s``, else
    ``gen_time_s``, from :func:`sim.control.observation.observe_step`) exceeds it is a straggler
    event even if ``max/median <= tau``. Why: max/median is scale-free, so when every
    length grows during training SAGC alone does not see it; the budget does. Also, a
    raise of G is refused when the predicted step time at the new G exceeds the budget
    (:meth:`predicted_step_s`). None (default): SAGC as in the paper, lengths only."""
    reading: str = "step"
    """Straggler reading: ``"step"`` (the paper's: ``S_t = 1[max/median > tau]`` over all
    the step's rollouts) or ``"group"`` (``S_t = 1`` when the group straggler share, the
    share of groups whose own max/median exceeds ``tau``, exceeds :attr:`level`;
    :func:`sim.trace.metrics.straggler_reading`). The step reading saturates once
    ``B x G`` is in the thousands (every step is a straggler); the group one does not."""
    level: float = 0.5
    """Group reading only: the share of straggling groups above which ``S_t = 1``."""
    length_history: int = 0
    """Per-prompt length history (:mod:`sim.control.length_history`): steps of groups kept
    (0: off, SAGC as in the paper). When on, each Thompson draw for candidate G is from
    ``Beta(alpha_G + length_history_n p_G, beta_G + length_history_n (1 - p_G))`` with ``p_G`` the
    straggler probability of the next batch's prompts at G read off the lengths seen
    (each seen prompt its own latest group; the controller asks for the prompt ids)."""
    length_history_n: float = 10.0
    """Weight of the length history's ``p_G`` in pseudo-steps."""
    seed: int = 0
    """Seed of the Thompson-sampling RNG (numpy PCG64)."""
    name: str = "sagc"

    alpha: dict[int, float] = field(init=False)
    beta: dict[int, float] = field(init=False)
    lam: float = field(init=False, default=0.0)
    current: int = field(init=False)
    steps_observed: int = field(init=False, default=0)
    step_s: dict[int, float] = field(init=False)
    """With a budget: per G, the geometric mean of the step times observed at it (s;
    forgetting ``gamma``; a rare straggler step moves it little, a sustained slowdown
    does), for :meth:`predicted_step_s`. Empty without a budget."""
    decision: dict[str, Any] = field(init=False)
    """The last proposal and observation, explained (:meth:`explain`)."""
    history: list[tuple[int, int, float]] = field(init=False)
    """``(G, S_t, lambda after update)`` per step observed by this object since it was
    built or loaded: a diagnostic log, not part of the state (the trace records G and the
    state per step; in the state it would make every step's JSON grow with the run)."""

    def __post_init__(self) -> None:
        cands = sorted({int(g) for g in self.candidates})
        if not cands or cands[0] < 1:
            raise ValueError(f"SAGC: candidates must be positive ints, got {self.candidates}")
        if self.G_min is not None:
            cands = [g for g in cands if g >= self.G_min]
            if not cands:
                raise ValueError(f"SAGC: no candidate >= G_min={self.G_min}")
        if self.step_time_budget_s is not None and not self.step_time_budget_s > 0:
            raise ValueError(f"SAGC: step_time_budget_s must be > 0, got {self.step_time_budget_s}")
        if not (0.0 <= self.delta <= 1.0):
            raise ValueError(f"SAGC: delta must be in [0, 1], got {self.delta}")
        if not (0.0 < self.gamma <= 1.0):
            raise ValueError(f"SAGC: gamma must be in (0, 1], got {self.gamma}")
        if self.tau <= 1.0 or self.eta_lambda <= 0 or self.radius < 1:
            raise ValueError("SAGC: need tau > 1, eta_lambda > 0, radius >= 1")
        if min(self.prior) <= 0:
            raise ValueError(f"SAGC: prior must be positive, got {self.prior}")
        if self.forget not in ("chosen", "to_prior"):
            raise ValueError(f"SAGC: forget must be 'chosen' or 'to_prior', got {self.forget!r}")
        if self.reading not in READINGS:
            raise ValueError(f"SAGC: reading must be one of {READINGS}, got {self.reading!r}")
        if not (0.0 <= self.level < 1.0):
            raise ValueError(f"SAGC: level must be in [0, 1), got {self.level}")
        if self.length_history < 0 or not self.length_history_n > 0:
            raise ValueError(
                "SAGC: need length_history >= 0 and length_history_n > 0, got "
                f"{self.length_history}, {self.length_history_n}"
            )
        self._lengths = LengthHistory(self.length_history) if self.length_history else None
        self._next_ids: Any = None
        a0, b0 = float(self.prior[0]), float(self.prior[1])
        self._prior_ab = {g: (a0, b0) for g in cands}
        if self.prior_p is not None:
            given = sorted({int(g) for g in self.candidates})
            if len(self.prior_p) != len(given) or not all(0 <= p <= 1 for p in self.prior_p):
                raise ValueError(
                    f"SAGC: prior_p needs one probability in [0, 1] per candidate {given}, "
                    f"got {self.prior_p}"
                )
            if not self.prior_n > 0:
                raise ValueError(f"SAGC: prior_n must be > 0, got {self.prior_n}")
            for g, p in zip(given, self.prior_p, strict=True):
                if g in self._prior_ab:
                    self._prior_ab[g] = (a0 + self.prior_n * p, b0 + self.prior_n * (1 - p))
        self.candidates = tuple(cands)
        self.alpha = {g: self._prior_ab[g][0] for g in cands}
        self.beta = {g: self._prior_ab[g][1] for g in cands}
        self.lam = 0.0
        start = self.init_G if self.init_G is not None else cands[(len(cands) - 1) // 2]
        if start not in cands:
            raise ValueError(f"SAGC: init_G {start} is not a candidate {cands}")
        self.current = start
        self.steps_observed = 0
        self.history = []
        self.step_s = {}
        self.decision = {"G": start, "why": "initial G"}
        self._rng = np.random.default_rng(self.seed)

    @property
    def observes(self) -> tuple[str, ...]:
        """Extras wanted by :func:`sim.control.observation.observe_step`: the step times when a
        budget is set, else none (lengths only, as in the paper)."""
        times = () if self.step_time_budget_s is None else ("gen_time_s", "step_time_s")
        return times + (("prompt_ids",) if self.length_history else ())

    @property
    def proposes(self) -> tuple[str, ...]:
        """What :meth:`propose` takes (:func:`sim.control.observation.propose_step`): the next
        batch's prompt ids with a length history, else nothing."""
        return ("prompt_ids",) if self.length_history else ()

    @property
    def straggler_budget(self) -> float:
        """The long-run straggler rate it targets (``delta``): what
        :func:`rolloutlab.testing.check_controller` checks under a stationary law."""
        return self.delta

    def neighbourhood(self) -> tuple[int, ...]:
        """Candidates within ``radius`` positions of the current G (local search)."""
        i = self.candidates.index(self.current)
        lo, hi = max(0, i - self.radius), min(len(self.candidates), i + self.radius + 1)
        return self.candidates[lo:hi]

    def propose(self, prompt_ids: Any = None) -> int:
        """Thompson-sample ``p~_G`` and return ``argmax log2 G - lambda p~_G`` locally;
        ``prompt_ids`` ((B,) ints of the next batch) serve the length history."""
        self._next_ids = prompt_ids
        return self.choose(math.log2)

    def choose(self, utility: Callable[[int], float]) -> int:
        """One primal step with any utility: Thompson-sample ``p~_G ~ Beta(alpha_G,
        beta_G)`` for each candidate of :meth:`neighbourhood` (in ascending order, one
        draw each) and move to ``argmax utility(G) - lambda p~_G`` (first one on ties;
        the current G if every score is ``-inf``). :meth:`propose` is
        ``choose(log2)``; :class:`sim.control.lagc.LAGC` passes its learning-signal utility.
        With a ``step_time_budget_s``, a G above
        the current one whose :meth:`predicted_step_s` exceeds the budget is refused (its
        draw is still made, so the random stream does not depend on the budget). The
        reasons are kept in :attr:`decision` (:meth:`explain`)."""
        best, best_score, considered = self.current, -math.inf, []
        for g in self.neighbourhood():
            a, b, p_hist = self.alpha[g], self.beta[g], None
            if self._lengths:
                p_hist = self._lengths.straggler_p(
                    self._rng, g, self.tau, self._next_ids, self.reading, self.level
                )
                w = self.length_history_n
                a, b = a + w * p_hist, b + w * (1 - p_hist)
            p = float(self._rng.beta(a, b))
            score = utility(g) - self.lam * p
            row: dict[str, Any] = {"G": g, "p": round(p, 6), "score": round(score, 6)}
            if p_hist is not None:
                row["p_history"] = round(p_hist, 6)
            if self.step_time_budget_s is not None:
                pred = self.predicted_step_s(g)
                row["predicted_step_s"] = pred
                if g > self.current and pred is not None and pred > self.step_time_budget_s:
                    row["refused"] = "budget"
                    considered.append(row)
                    continue
            considered.append(row)
            if score > best_score:
                best, best_score = g, score
        why = "kept" if best == self.current else "raised" if best > self.current else "lowered"
        if any("refused" in r for r in considered):
            why += "; raise refused: predicted step time over budget"
        self.decision = {
            "G": best,
            "from": self.current,
            "why": f"{why} (argmax u(G) - lambda p~)",
            "lambda": round(self.lam, 6),
            "budget_s": self.step_time_budget_s,
            "candidates": considered,
            "after": self.decision.get("observed"),
        }
        self.current = best
        return best

    def predicted_step_s(self, g: int) -> float | None:
        """Predicted step time (s) at group size ``g``: the typical time at the current G
        (:attr:`step_s`, the freshest estimate; else at the nearest G observed) scaled by
        ``g / G`` (a step's rollouts and learner tokens grow in proportion to G; the
        straggler max grows with G too, so on a saturated engine this underestimates
        rather than over). None before any step time was observed (always without a
        budget)."""
        if not self.step_s:
            return None
        h = self.current
        if h not in self.step_s:
            h = min(self.step_s, key=lambda x: (abs(x - g), x))
        return self.step_s[h] * g / h

    def explain(self) -> dict[str, Any]:
        """The last decision and what the last observation concluded (JSON-able): the G
        chosen and from which, why, lambda, the budget and each candidate considered
        (sampled straggler probability, score, predicted step time, refusal); ``after``:
        the observation it followed and ``observed``: the one of the step run with it
        (straggler event, ratio against ``tau``, step time, thresholds crossed)."""
        return dict(self.decision)

    def observe(
        self,
        lengths: Sequence[Sequence[int]],
        gen_time_s: float | None = None,
        step_time_s: float | None = None,
        prompt_ids: Any = None,
    ) -> None:
        """Update the posterior of the G that produced ``lengths``, and lambda; with a
        length history, remember the lengths (per prompt when ``prompt_ids`` is given).

        That G is the common group size of ``lengths`` when it is a candidate (so an
        asynchronous pipeline that consumes a batch several proposals after proposing it
        credits the right G), else the last proposed G (e.g. groups trimmed by DAPO's
        dynamic sampling). ``S_t = 1`` when ``max/median > tau`` (the group reading: when
        the group straggler share exceeds ``level``, :attr:`reading`), or, with a
        ``step_time_budget_s``, when the step's time (``step_time_s``, else
        ``gen_time_s``; seconds) exceeds it; times are ignored without a budget.
        """
        _check_lengths(lengths)
        if self._lengths is not None:
            self._lengths.add(lengths, prompt_ids)
        ratio, s_t = straggler_reading(lengths, self.tau, self.reading, self.level)
        crossed = [("tau" if self.reading == "step" else "level")] if s_t else []
        t = None
        if self.step_time_budget_s is not None:
            t = step_time_s if step_time_s is not None else gen_time_s
            if t is not None and float(t) > self.step_time_budget_s:
                s_t = 1
                crossed.append("budget")
        sizes = {len(group) for group in lengths}
        g = sizes.pop() if len(sizes) == 1 else self.current
        if g not in self.alpha:
            g = self.current
        if t is not None:  # geometric mean with forgetting (rare stragglers are p~'s job)
            lt, old = math.log(max(float(t), 1e-12)), self.step_s.get(g)
            mix = lt if old is None else self.gamma * math.log(old) + (1 - self.gamma) * lt
            self.step_s[g] = math.exp(mix)
        self.decision = {
            **self.decision,
            "observed": {
                "G": g,
                "S_t": s_t,
                ("ratio" if self.reading == "step" else "group_share"): round(float(ratio), 6),
                "tau": self.tau,
                **({"level": self.level} if self.reading == "group" else {}),
                "step_s": None if t is None else float(t),
                "crossed": crossed,
            },
        }
        if self.forget == "to_prior":
            for c in self.candidates:
                a0, b0 = self._prior_ab[c]
                self.alpha[c] = self.gamma * self.alpha[c] + (1 - self.gamma) * a0
                self.beta[c] = self.gamma * self.beta[c] + (1 - self.gamma) * b0
            self.alpha[g] += s_t
            self.beta[g] += 1 - s_t
        else:
            self.alpha[g] = self.gamma * self.alpha[g] + s_t
            self.beta[g] = self.gamma * self.beta[g] + (1 - s_t)
        self.lam = max(0.0, self.lam + self.eta_lambda * (s_t - self.delta))
        self.steps_observed += 1
        self.history.append((g, s_t, self.lam))

    def posterior_mean(self) -> dict[int, float]:
        """Posterior mean straggler probability per candidate G."""
        return {g: self.alpha[g] / (self.alpha[g] + self.beta[g]) for g in self.candidates}

    def state_dict(self) -> dict[str, Any]:
        """JSON state: the Beta posteriors per G, the dual variable lambda, the current G,
        the step count and the RNG state (:meth:`load_state_dict` restores it exactly)."""
        return {
            "kind": "sagc",
            "candidates": list(self.candidates),
            "alpha": {str(g): a for g, a in self.alpha.items()},
            "beta": {str(g): b for g, b in self.beta.items()},
            "lambda": self.lam,
            "current": self.current,
            "steps_observed": self.steps_observed,
            "rng": self._rng.bit_generator.state,
            **({"step_s": {str(g): v for g, v in self.step_s.items()}} if self.step_s else {}),
            **({"length_history": self._lengths.state_dict()} if self._lengths is not None else {}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output: posteriors, lambda, current G, step count
        and RNG, so the run continues exactly as if never interrupted. ``history`` starts
        empty (see its docstring). Raises ValueError for another kind or candidate set."""
        if state.get("kind") != "sagc" or list(state["candidates"]) != list(self.candidates):
            raise ValueError(
                f"SAGC{self.candidates}: cannot load state of kind "
                f"{state.get('kind')!r} with candidates {state.get('candidates')}"
            )
        self.alpha = {int(g): float(a) for g, a in state["alpha"].items()}
        self.beta = {int(g): float(b) for g, b in state["beta"].items()}
        self.lam = float(state["lambda"])
        self.current = int(state["current"])
        self.steps_observed = int(state["steps_observed"])
        self.step_s = {int(g): float(v) for g, v in state.get("step_s", {}).items()}
        if self._lengths is not None and "length_history" in state:
            self._lengths.load_state_dict(state["length_history"])
        self.history = []
        self._rng.bit_generator.state = state["rng"]


SPEC_KINDS = ("static", "sagc", "lagc")
"""Built-in controller kinds of a spec (:func:`sim.control.spec.parse_controller`)."""

_OPTION = re.compile(r"^[A-Za-z_]\w*=")


def split_specs(text: str) -> list[str]:
    """Split a comma-separated list of controller specs, keeping a spec's own
    ``key=value`` pairs together: ``"static:4,sagc:tau=15,delta=0.2"`` ->
    ``["static:4", "sagc:tau=15,delta=0.2"]``, and the same for external specs
    (``"my.py:Ctl:a=1,b=2,sagc"`` -> ``["my.py:Ctl:a=1,b=2", "sagc"]``): a part that is a
    bare ``identifier=value`` continues the previous spec, any other part starts one."""
    specs: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if specs and _OPTION.match(part):
            specs[-1] += "," + part
        else:
            specs.append(part)
    return specs
