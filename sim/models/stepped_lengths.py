"""Step-indexed empirical lengths: replay how a logged run's response lengths drifted.

A logged RL run's length law is not stationary: as the policy learns, the tail of long
searches grows and the body moves (``docs/per_sample.md``, graph-walk: censored responses
per 20 steps 1, 0, 7, 7, 23, 19, 45, 19, 81, 50). :class:`sim.models.lengths.EmpiricalLengths`
pools every logged group, so a simulated run sees the run-average law at every step.
:class:`SteppedEmpiricalLengths` draws, at simulated step ``t``, only from the logged
groups of the steps around ``t``: a simulated run of the same length as the logged one
follows its drift (``compare groups --held-out`` measures this against another run of
the same configuration).

Window at step ``t`` (steps counted from the first logged step, the model's step 0):
the ``window`` logged steps ``lo .. lo + window - 1`` with ``lo = t - window // 2``,
shifted to stay inside the logged steps, so every step draws from ``window`` steps'
groups (or all of them when fewer were logged). Beyond the last logged step it is the
last ``window`` steps: the ``--fit-window`` model of the recent past.

Draws keep the common random numbers of :class:`sim.models.lengths.EmpiricalLengths`: a
prompt's uniform ``u_p`` (keyed on its id) picks group ``floor(u_p * n(t))`` of the
window's ``n(t)`` groups, and sample ``j`` is entry ``j`` of that group's permutation
keyed on (step, prompt), so sample ``j`` is the same whatever ``G``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from rolloutlab.sim.models.hashrng import hash_uniform
from rolloutlab.sim.models.lengths import EmpiricalLengths, check_draw_size, draw_keys


@dataclass(frozen=True)
class SteppedEmpiricalLengths:
    """Observed groups, each with its logged step; a step draws from its window's groups.

    ``groups``: one int array of response lengths (tokens, >= 1) per logged group;
    ``group_steps``: ``(len(groups),)`` the step of each group, counted from the model's
    step 0 (any order; stored sorted); ``window``: logged steps per draw window (>= 1);
    ``replace``: as :class:`sim.models.lengths.EmpiricalLengths` (False: a prompt's G samples are
    G distinct entries of one observed group, so G above the smallest group raises
    ValueError). Raises ValueError on no group, an empty group, a length < 1, a
    ``group_steps`` of another length than ``groups`` or a ``window`` < 1.
    """

    groups: tuple[np.ndarray, ...]
    group_steps: np.ndarray
    window: int
    max_response_length: int
    replace: bool = False
    _order: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        steps = np.asarray(self.group_steps, dtype=np.int64)
        if len(self.groups) == 0 or steps.shape != (len(self.groups),):
            raise ValueError(
                "SteppedEmpiricalLengths: need >= 1 group and one step per group, got "
                f"{len(self.groups)} groups and {steps.size} steps"
            )
        if self.window < 1:
            raise ValueError(f"SteppedEmpiricalLengths: window must be >= 1, got {self.window}")
        object.__setattr__(self, "_order", np.argsort(steps, kind="stable"))
        object.__setattr__(self, "group_steps", steps)

    @cached_property
    def _inner(self) -> EmpiricalLengths:
        """The groups sorted by step, as one :class:`sim.models.lengths.EmpiricalLengths` (its
        checks and lookups)."""
        groups = tuple(np.asarray(self.groups[i], dtype=np.int64) for i in self._order)
        return EmpiricalLengths(
            np.concatenate(groups), self.max_response_length, groups=groups, replace=self.replace
        )

    @cached_property
    def logged_steps(self) -> np.ndarray:
        """Distinct logged steps, ascending."""
        return np.unique(self.group_steps)

    @cached_property
    def _sorted_steps(self) -> np.ndarray:
        """Each group's step, in step order (the groups of :attr:`_inner`)."""
        return self.group_steps[self._order]

    def pool(self, step) -> tuple[np.ndarray, np.ndarray]:
        """``(first, count)``: index range of the window's groups in step order at
        ``step`` (int or int array; same shape out)."""
        logged, sorted_steps = self.logged_steps, self._sorted_steps
        w = min(self.window, logged.size)
        # position of the window's first logged step: centred on step, kept inside
        pos = np.searchsorted(logged, np.asarray(step, dtype=np.int64) - self.window // 2)
        pos = np.clip(pos, 0, logged.size - w)
        first = np.searchsorted(sorted_steps, logged[pos], side="left")
        end = np.searchsorted(sorted_steps, logged[pos + w - 1], side="right")
        return first, end - first

    def _which(self, u: np.ndarray, step) -> np.ndarray:
        first, count = self.pool(step)
        return first + np.minimum((u * count).astype(np.int64), count - 1)

    def sample_ids(self, seed: int, step, prompt_ids: np.ndarray, G: int) -> np.ndarray:
        """``prompt_ids.shape + (G,)`` int64 lengths at ``step`` (an int, or an array
        that broadcasts with ``prompt_ids``), keyed like
        :meth:`sim.models.lengths.EmpiricalLengths.sample_ids`. Raises ValueError if ``G < 1``
        or, without replacement, G above the smallest observed group."""
        pid, step_k = draw_keys(prompt_ids, step, G)
        which = self._which(hash_uniform(seed, 3, pid), step_k)
        width = G if self.replace else self._inner.widest_group
        u = hash_uniform(seed, 4, step_k, pid, np.arange(width))
        return self._inner.draw_from_groups(which, u, G)

    def sample(self, rng: np.random.Generator, n_prompts: int, G: int, step: int = 0) -> np.ndarray:
        """``(n_prompts, G)`` draws at ``step`` from the caller's ``rng``; sample ``j``
        from the same stream position whatever ``G``."""
        check_draw_size(n_prompts, G)
        which = self._which(rng.random(n_prompts)[:, None], step)
        width = G if self.replace else self._inner.widest_group
        return self._inner.draw_from_groups(which, rng.random((width, n_prompts)).T, G)
