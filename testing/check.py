"""``check_controller(factory)``: every property of :mod:`rolloutlab.testing.contract`
against one controller, with hypothesis finding and shrinking counterexamples.

Each stream property is searched with :func:`hypothesis.find` (derandomized, no example
database: the same result every run) for an example on which it fails; a failure is
reported with the smallest failing example hypothesis shrank it to and the error it
gives. Decision time per step (propose + observe) is measured on property 1's streams
and reported; with ``budget_ms`` a 99th percentile above it is a failure (report only:
the project's own tests never pass a budget).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Verbosity, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample
from rolloutlab.sim.control.spec import parse_controller
from rolloutlab.testing import contract
from rolloutlab.testing.strategies import extreme_streams, streams

PROPERTIES = ("candidates", "extremes", "restore", "seed", "straggler", "timing")
"""Keys of the properties (``only=``; ``--only`` of ``rolloutlab check-controller``):
:mod:`rolloutlab.testing.contract` 1-5 in its order, then decision time."""

SHORT_STEPS = 3
"""Longest stream of the first search stage (:func:`_stages`)."""


@dataclass
class PropertyResult:
    """One property's outcome: ``status`` is ``"pass"``, ``"fail"`` or ``"skip"``;
    ``detail`` the error (or what was measured); ``example`` the smallest failing
    example (one step per line, :func:`describe`), when hypothesis found one."""

    key: str
    name: str
    status: str
    detail: str = ""
    example: str | None = None


@dataclass
class CheckReport:
    """What :func:`check_controller` found: ``results`` per property, ``timing_ms``
    (``mean``, ``p99``, ``max`` of propose + observe per step, milliseconds)."""

    controller: str
    results: list[PropertyResult] = field(default_factory=list)
    timing_ms: dict[str, float] = field(default_factory=dict)

    @property
    def failed(self) -> list[PropertyResult]:
        """The properties that failed."""
        return [r for r in self.results if r.status == "fail"]

    @property
    def ok(self) -> bool:
        """True when no property failed."""
        return not self.failed

    def __str__(self) -> str:
        n = {s: sum(r.status == s for r in self.results) for s in ("pass", "fail", "skip")}
        lines = [
            f"check-controller {self.controller}: {n['pass']} passed, {n['fail']} failed"
            + (f", {n['skip']} skipped" if n["skip"] else "")
        ]
        for r in self.results:
            lines.append(
                f"  {r.status.upper():4}  [{r.key}] {r.name}"
                + (f": {r.detail}" if r.detail else "")
            )
            if r.example is not None:
                lines.append("        smallest failing example:")
                lines.extend("          " + x for x in r.example.splitlines())
        return "\n".join(lines)


def as_factory(factory: Any) -> tuple[Callable[[int], Any], str]:
    """``(seed -> controller, name)`` from a spec string (:func:`parse_controller`), a
    class or any callable (given ``seed=`` when its signature has a ``seed`` parameter,
    else called with no argument)."""
    if isinstance(factory, str):
        spec = factory
        return (lambda seed: parse_controller(spec, seed=seed)), spec
    if not callable(factory):
        raise TypeError(f"check_controller: need a spec, a class or a callable, got {factory!r}")
    name = getattr(factory, "__name__", None) or repr(factory)
    try:
        takes_seed = "seed" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        takes_seed = False
    if takes_seed:
        return (lambda seed: factory(seed=seed)), name
    return (lambda seed: factory()), name


def _search(
    prop: Callable[[Any], None], strategy: st.SearchStrategy, max_examples: int
) -> tuple[Any, str] | None:
    """The smallest example on which ``prop`` raises, and its error; None if hypothesis
    finds none in ``max_examples`` tries."""

    def fails(example: Any) -> bool:
        try:
            prop(example)
        except Exception:
            return True
        return False

    cfg = settings(
        max_examples=max_examples,
        database=None,
        derandomize=True,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
    )
    try:
        example = find(strategy, fails, settings=cfg)
    except NoSuchExample:
        return None
    try:
        prop(example)
    except Exception as exc:
        return example, " ".join(f"{type(exc).__name__}: {exc}".split())
    return example, "failed during the search but not on the shrunk example (not deterministic?)"


def _stages(max_steps: int, max_examples: int) -> list[tuple[int, int]]:
    """``(stream length, examples)`` of the search stages: streams of at most
    ``SHORT_STEPS`` steps with half the examples first, then streams up to
    ``max_steps`` with the rest. Why: contract bugs show within a few steps, and a short
    counterexample shrinks in a few hundred calls where a long one takes thousands."""
    if max_steps <= SHORT_STEPS:
        return [(max_steps, max_examples)]
    half = max(max_examples // 2, 1)
    return [(SHORT_STEPS, half), (max_steps, max(max_examples - half, 1))]


def check_controller(
    factory: Any,
    *,
    seed: int = 0,
    max_examples: int = 25,
    max_steps: int = 24,
    straggler_steps: int = 2000,
    straggler_tolerance: float = 0.1,
    budget_ms: float | None = None,
    raise_on_failure: bool = True,
    only: Sequence[str] | None = None,
) -> CheckReport:
    """Check a controller against the contract (:mod:`rolloutlab.testing.contract`).

    ``factory``: a spec (``"sagc:tau=3"``, ``"my_file.py:MyCtl:k=v"``), a class or a
    callable returning a fresh controller (given ``seed=`` when it takes one).
    ``max_examples``: hypothesis examples per stream property; ``max_steps``: longest
    stream; ``straggler_steps``: length of the stationary run of property 5 (rate of
    its second half, ``|rate - budget| <= straggler_tolerance``); ``budget_ms``: p99
    decision time allowed (None: reported only). ``only``: the keys of
    :data:`PROPERTIES` to check (default all).

    Returns the :class:`CheckReport`. Raises :class:`contract.ContractViolation` (an
    AssertionError, so one line in a pytest test fails it with the report) when a
    property failed and ``raise_on_failure``; whatever the factory raises when it cannot
    build a controller (ValueError naming a bad spec); ValueError for an unknown key in
    ``only``.
    """
    make, name = as_factory(factory)
    make(seed)  # a factory that cannot build is the caller's error, raised as is
    unknown = set(only or ()) - set(PROPERTIES)
    if unknown:
        raise ValueError(
            f"check_controller: unknown properties {sorted(unknown)}; known: {PROPERTIES}"
        )
    chosen = tuple(only or PROPERTIES)
    report = CheckReport(name)
    timings: list[float] = []
    searches: dict[str, tuple[str, Callable[[Any], None], Callable[[int], Any]]] = {
        "candidates": (
            "proposes a positive int from its candidates",
            lambda laws: contract.proposes_candidates(make, seed, laws, timings),
            streams,
        ),
        "extremes": (
            "no exception and a finite JSON state on extreme observations",
            lambda laws: contract.survives_extremes(make, seed, laws),
            extreme_streams,
        ),
        "restore": (
            "state round-trips through JSON; a restored controller continues bit-identically",
            lambda ex: contract.restores_exactly(make, seed, ex),
            lambda n: st.tuples(streams(n), st.integers(0, n)),
        ),
        "seed": (
            "same seed, same decisions",
            lambda laws: contract.same_seed_same_decisions(make, seed, laws),
            streams,
        ),
    }
    for key in (k for k in chosen if k in searches):
        title, prop, strategy = searches[key]
        found = None
        for n, tries in _stages(max_steps, max_examples):  # short streams first
            found = _search(prop, strategy(n), tries)
            if found is not None:
                break
        if found is None:
            report.results.append(PropertyResult(key, title, "pass"))
        else:
            example, error = found
            report.results.append(PropertyResult(key, title, "fail", error, describe(example)))
    if "straggler" in chosen:
        report.results.append(_straggler(make, seed, straggler_steps, straggler_tolerance))
    if "timing" in chosen:
        report.results.append(_timing(report, timings, budget_ms))
    if raise_on_failure and not report.ok:
        raise contract.ContractViolation(str(report))
    return report


def describe(example: Any) -> str:
    """A stream (or ``(stream, k)`` of the restore property) one step per line."""
    head = []
    if len(example) == 2 and isinstance(example[1], int):
        example, k = example
        head = [f"restore after {min(k, len(example))} of these steps:"]
    return "\n".join(head + [f"step {i}: {law.describe()}" for i, law in enumerate(example)])


def _straggler(make, seed: int, steps: int, tol: float) -> PropertyResult:
    key, title = "straggler", "long-run straggler rate near its straggler_budget"
    try:
        rate, budget, law = contract.straggler_rate(make, seed, steps)
    except ValueError as exc:
        return PropertyResult(key, title, "skip", str(exc))
    except Exception as exc:
        return PropertyResult(key, title, "fail", f"{type(exc).__name__}: {exc}")
    detail = f"rate {rate:.3f} over steps {steps // 2}..{steps - 1}, budget {budget:g} ({law})"
    return PropertyResult(key, title, "pass" if abs(rate - budget) <= tol else "fail", detail)


def _timing(report: CheckReport, timings: list[float], budget_ms: float | None) -> PropertyResult:
    key, title = "timing", "decision time per step (propose + observe)"
    if not timings:
        return PropertyResult(key, title, "skip", "no step ran")
    ms = np.asarray(timings) * 1e3
    report.timing_ms = {
        "mean": float(ms.mean()),
        "p99": float(np.percentile(ms, 99)),
        "max": float(ms.max()),
    }
    t = report.timing_ms
    detail = f"mean {t['mean']:.3f} ms, p99 {t['p99']:.3f} ms, max {t['max']:.3f} ms over {len(ms)} steps"
    if budget_ms is None:
        return PropertyResult(key, title, "pass", detail + " (no budget)")
    ok = t["p99"] <= budget_ms
    return PropertyResult(
        key, title, "pass" if ok else "fail", f"{detail}; budget {budget_ms:g} ms"
    )
