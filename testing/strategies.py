"""Hypothesis strategies for realistic observation streams (:class:`StepLaw` sequences).

- :func:`step_laws`: one step: heavy-tailed (lognormal up to sigma 2.5, pareto down to
  tail index 0.8), all-equal groups, a single cap-length straggler, groups of one
  rollout (G = 1), rewards absent / all 0 / all 1 / mixed, one to eight prompts;
- :func:`stationary_streams`: one law, fresh draws each step;
- :func:`drifting_streams`: the median grows (or shrinks) geometrically per step, as
  chains of thought lengthen during training (PAPERS.md §1);
- :func:`shifting_streams`: one law, then another from a step on (a new task mix);
- :func:`extreme_streams`: only the edge cases (equal groups, cap stragglers, G = 1,
  one prompt, median 1 or at the cap, rewards all 0 or all 1);
- :func:`streams`: any of the above.

A stream is a tuple of :class:`rolloutlab.testing.laws.StepLaw`; the kit plays it
closed-loop (:func:`rolloutlab.testing.laws.materialize` at each proposed G), and
hypothesis shrinks a failing one to few, simple steps.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st
from rolloutlab.testing.laws import REWARDS, StepLaw

CAP = 4096
"""Response cap (tokens) of the drawn laws."""


def step_laws(cap: int = CAP) -> st.SearchStrategy[StepLaw]:
    """One step's law (module docstring), lengths clipped to ``[1, cap]``."""
    return st.builds(
        StepLaw,
        shape=st.sampled_from(["equal", "cap_straggler", "lognormal", "pareto"]),
        median=st.integers(1, cap),
        spread=st.floats(0.8, 2.5),
        prompts=st.integers(1, 8),
        rewards=st.sampled_from(REWARDS),
        group=st.sampled_from([None, None, None, 1]),
        seed=st.integers(0, 2**16),
        cap=st.just(cap),
    )


def _reseeded(law: StepLaw, n: int) -> tuple[StepLaw, ...]:
    """``n`` copies of ``law`` with seeds ``seed, seed + 1, ...`` (fresh draws)."""
    return tuple(replace(law, seed=law.seed + t) for t in range(n))


def stationary_streams(max_steps: int = 24, cap: int = CAP) -> st.SearchStrategy:
    """One law for 1..``max_steps`` steps."""
    return st.builds(_reseeded, step_laws(cap), st.integers(1, max_steps))


@st.composite
def drifting_streams(draw, max_steps: int = 24, cap: int = CAP) -> tuple[StepLaw, ...]:
    """One law whose median is multiplied by ``growth`` in [0.8, 1.5] each step."""
    law = draw(step_laws(cap))
    n = draw(st.integers(1, max_steps))
    growth = draw(st.floats(0.8, 1.5))
    return tuple(
        replace(law, seed=law.seed + t, median=int(min(max(law.median * growth**t, 1), cap)))
        for t in range(n)
    )


@st.composite
def shifting_streams(draw, max_steps: int = 24, cap: int = CAP) -> tuple[StepLaw, ...]:
    """One law for ``k`` steps, then another (``k`` in 1..``max_steps - 1``)."""
    first, second = draw(step_laws(cap)), draw(step_laws(cap))
    n = draw(st.integers(2, max(max_steps, 2)))
    k = draw(st.integers(1, n - 1))
    return _reseeded(first, k) + _reseeded(second, n - k)


def extreme_streams(max_steps: int = 24, cap: int = CAP) -> st.SearchStrategy:
    """Edge cases only: equal groups, cap stragglers, G = 1 groups, one prompt, median 1
    or at the cap, rewards all 0 or all 1."""
    law = st.builds(
        StepLaw,
        shape=st.sampled_from(["equal", "cap_straggler", "pareto"]),
        median=st.sampled_from([1, 2, cap]),
        spread=st.just(0.8),
        prompts=st.sampled_from([1, 8]),
        rewards=st.sampled_from(["zeros", "ones", "none"]),
        group=st.sampled_from([None, 1]),
        seed=st.integers(0, 2**16),
        cap=st.just(cap),
    )
    return st.lists(law, min_size=1, max_size=max_steps).map(tuple)


def _expand(segments: list[tuple[StepLaw, int, float]], max_steps: int) -> tuple[StepLaw, ...]:
    """Segments ``(law, steps, growth)`` -> a stream of at most ``max_steps`` laws: each
    segment repeats its law with fresh seeds, the median times ``growth`` per step."""
    out: list[StepLaw] = []
    for law, n, growth in segments:
        for t in range(n):
            median = int(min(max(round(law.median * growth**t), 1), law.cap))
            out.append(replace(law, seed=law.seed + t, median=median))
    return tuple(out[:max_steps])


def streams(max_steps: int = 24, cap: int = CAP) -> st.SearchStrategy:
    """Any stream, as a list of segments (one law for some steps, its median drifting by
    a factor per step): one segment is a stationary or drifting stream, two a shift,
    many one-step segments independent steps. One structure, so hypothesis shrinks a
    failing stream by dropping segments, shortening them and stopping the drift."""
    segment = st.tuples(
        step_laws(cap), st.integers(1, max_steps), st.sampled_from([1.0, 0.8, 1.1, 1.25, 1.5])
    )
    return st.lists(segment, min_size=1, max_size=max_steps).map(
        lambda segs: _expand(segs, max_steps)
    )
