"""What ``rolloutlab advise``'s answer rests on: the model assumptions the scenario (a
calibration file) did not measure, and which of the chosen setting's knobs are ties.

**Assumptions** (:func:`assumptions`): one line each, read from the scenario's blocks
(its ``learning`` block and fit, ``step_phases``, ``provenance.assumptions``) and the
searched space. A line is printed only where the assumption moves the answer and the
file holds no measurement of it:

- the learning gain linear in lr (``d_theta ~ lr / lr_ref``, docs/learning.md §2) when
  the searched lr differ from the ``lr_ref`` the fit saw: no calibration fits the gain at
  two learning rates, so time to target shrinks in proportion to lr up to the collapse
  margin and the answer leans to the top of the lr grid;
- progress per step independent of B and G's sample count (``b_noise = 0``) unless the
  noise law was fitted (its fit lists the ``(G, B)`` settings it saw);
- no saturation of the logit shift (``theta_max`` null) unless a saturating fit tested it;
- the staleness model's ``eta_ref`` (the collapse margin's scale), which no calibration
  fits;
- the reward latency law and reward workers of a ``step_phases`` block, whose scale alone
  the log fits;
- no learning model at all: the objective is time per step, lr moves only the margin.

**Ties** (:func:`choices`): for each searched knob, the runner-up is the fastest feasible
setting that differs from the chosen one in that knob alone (priced after the search
where the search had not). The choice is a tie when ``|t_runner / t_chosen - 1| <=
max(spread, TIE_FLOOR)``, ``spread`` the run-to-run spread of the chosen setting: the
relative standard deviation (ddof 1) of its objective over :data:`SPREAD_SEEDS` seeds.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from rolloutlab.sim.models.learning import LearningParams
from rolloutlab.sim.scenario.scenario import Scenario

TIE_FLOOR = 0.01
"""A choice whose runner-up is within 1 % of it is a tie even when the seeds agree
closer: the simulator's own error against measured steps is several per cent
(docs/calibration.md), so 1 % separates nothing a run would show."""

SPREAD_SEEDS = 3
"""Seeds the chosen setting is priced at (the search's and the next two) for the
run-to-run spread."""


def assumptions(
    scenario: Scenario, lrs: tuple[float, ...], varied: set[str], use_target: bool
) -> list[str]:
    """The assumption lines (module docstring) for ``scenario`` searched over learning
    rates ``lrs``; ``varied``: the searched knobs with more than one value
    (``prompts``, ``controller``, ...); ``use_target``: time to the target reward is the
    objective (a learning model drives it)."""
    source = scenario.source if isinstance(scenario.source, dict) else {}
    fit = _object(_object(source, "learning"), "fit")
    params = scenario.learning or LearningParams(kappa=0.0)
    lines = []
    if scenario.learning is None or not use_target:
        why, fix = (
            ("no learning block", "pass rates and a learning fit: `rolloutlab calibrate learning`")
            if scenario.learning is None
            else ("no target reward", "--target-reward R for time to that reward")
        )
        lines.append(
            f"{why}: the objective is time per step, not time to a result, and lr moves "
            f"only the collapse margin ({fix}; docs/learning.md)"
        )
    else:
        off = [lr for lr in lrs if not math.isclose(lr, params.lr_ref, rel_tol=1e-9)]
        if off:
            top = max(lrs) / params.lr_ref
            lines.append(
                f"learning gain linear in lr (docs/learning.md §2): fitted at lr_ref = "
                f"{params.lr_ref:g} only, the searched lr reach x{top:.3g} of it; time to "
                "target falls in proportion to lr until the collapse margin stops it, so "
                "the answer leans to the top of the lr grid"
            )
        noise_fitted = "settings" in fit  # the noise law's fit lists its (G, B) settings
        if params.b_noise == 0 and not noise_fitted and varied & {"prompts", "controller"}:
            lines.append(
                "progress per step independent of B and of G's sample count (b_noise = 0, "
                "not fitted: it needs runs at two or more (G, B) settings, `calibrate "
                "learning --real`; docs/learning.md, 'Progress with noise'): a larger B "
                "or G costs time per step and buys no progress per step"
            )
        if math.isinf(params.theta_max) and fit.get("likelihood_ratio_vs_linear") is None:
            lines.append(
                "reward progress without saturation (theta_max null: the linear shift, "
                "not tested against the saturating one; docs/learning.md §2): long runs "
                "keep the early gain per step"
            )
    lines.append(
        f"collapse margin on the staleness model's constants: eta_ref = {params.eta_ref:g} "
        f"at lr_ref = {params.lr_ref:g} is a modelling choice no calibration fits "
        "(docs/learning.md §2; `rolloutlab real stability` measures a boundary)"
    )
    assumed = _object(_object(source, "provenance"), "assumptions")
    shape = _object(assumed, "reward_latency_shape")
    if scenario.step_phases is not None and scenario.step_phases.reward is not None and shape:
        a, b = shape.get("a"), shape.get("b")
        numbers = all(isinstance(v, (int, float)) for v in (a, b))
        law = f"{shape.get('kind')}({a:g}, {b:g}) s" if numbers else json.dumps(shape)
        lines.append(
            f"reward latency law {law} and {assumed.get('reward_workers', '?')} reward "
            "workers assumed (the log gives the reward phase's length only; its scale was "
            "fitted; docs/step_phases.md): B and G move the reward wait through them"
        )
    return lines


@dataclass(frozen=True)
class Choice:
    """One searched knob of the chosen setting against its runner-up."""

    knob: str
    """The setting's name (``workers``, ``lr``, ...)."""
    chosen: Any
    runner_up: Any
    """The runner-up's value of the knob; None when no setting differing in it alone is
    feasible."""
    chosen_s: float
    """The chosen setting's objective (s, or GPU-hours)."""
    runner_up_s: float | None
    gap: float | None
    """``runner_up_s / chosen_s - 1``: > 0 the runner-up is slower."""
    threshold: float
    """``max(spread, TIE_FLOOR)``."""
    verdict: str
    """``tie``, ``choice`` (the runner-up is slower by more than the threshold), ``beaten``
    (priced after the search, it is faster by more than the threshold) or ``alone`` (no
    feasible alternative)."""

    def line(self, unit: str = "s") -> str:
        """The choice in words, e.g. ``workers = 8: a tie with 4 (198.6 s, +0.2%)``."""
        head = f"{self.knob} = {_fmt(self.chosen)}"
        if self.verdict == "alone":
            return f"{head}: no feasible setting differs in {self.knob} alone"
        t = self.runner_up_s
        value = f"{t:,.0f}" if t is not None and abs(t) >= 100 else f"{t:.3g}"
        other = f"{_fmt(self.runner_up)} ({value} {unit}, {self.gap:+.1%})"
        return {
            "tie": f"{head}: a tie with {other}",
            "choice": f"{head}: chosen over {other}",
            "beaten": f"{head}: beaten by {other}, priced after the search",
        }[self.verdict]

    def to_dict(self) -> dict[str, Any]:
        """The fields, strict JSON."""
        return asdict(self)


def _object(d: dict[str, Any], key: str) -> dict[str, Any]:
    """``d[key]`` when it is an object, else ``{}`` (a block a hand-written file may lack)."""
    v = d.get(key)
    return v if isinstance(v, dict) else {}


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def relative_spread(values: list[float | None]) -> float | None:
    """Relative standard deviation (ddof 1) of ``values`` (the chosen setting's objective
    over seeds; None for a seed that did not reach the target); None with fewer than two
    values or a non-positive mean."""
    v = np.array([x for x in values if x is not None], dtype=float)
    if v.size < 2 or not v.mean() > 0:
        return None
    return float(v.std(ddof=1) / v.mean())


def neighbours(
    best: dict[str, Any], space: dict[str, tuple], reach: int | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """``(knob, setting)`` for every setting that differs from ``best`` in one knob of
    ``space`` (knob -> its searched values), in the space's order; with ``reach``, only
    values at most ``reach`` places from ``best``'s in the knob's list (``reach=1``: one
    grid step down and up)."""
    out = []
    for k, values in space.items():
        near = values
        if reach is not None:
            here = values.index(best[k])
            near = values[max(0, here - reach) : here + reach + 1]
        out += [(k, {**best, k: v}) for v in near if v != best[k]]
    return out


def choices(
    best: dict[str, Any],
    best_s: float,
    priced: list[tuple[str, dict[str, Any], float | None]],
    spread: float | None,
) -> list[Choice]:
    """One :class:`Choice` per knob that :func:`neighbours` varied: ``priced`` holds
    ``(knob, setting, objective)`` of each neighbour, ``objective`` None where it is
    infeasible or failed. Knobs in first-seen order."""
    threshold = max(spread or 0.0, TIE_FLOOR)
    out = []
    for knob in dict.fromkeys(k for k, _, _ in priced):
        options = [(s[knob], t) for k, s, t in priced if k == knob and t is not None]
        if not options:
            out.append(Choice(knob, best[knob], None, best_s, None, None, threshold, "alone"))
            continue
        value, t = min(options, key=lambda o: o[1])
        gap = t / best_s - 1
        verdict = "tie" if abs(gap) <= threshold else ("choice" if gap > 0 else "beaten")
        out.append(Choice(knob, best[knob], value, best_s, t, gap, threshold, verdict))
    return out


def choice_header(spread: float | None, seeds: int = SPREAD_SEEDS) -> str:
    """The line above the choices: the tie rule with its numbers."""
    sd = "n/a" if spread is None else f"{spread:.2%}"
    return (
        "each choice against the best feasible setting differing in that knob alone; a tie "
        f"when within max(run-to-run spread {sd} over {seeds} seeds, {TIE_FLOOR:.0%}):"
    )
