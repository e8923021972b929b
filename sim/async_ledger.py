"""Book-keeping of the asynchronous pipelines (:mod:`sim.async_pipeline`): one prompt
group, one dispatched batch, and the :class:`Ledger` of where every rollout ended."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from rolloutlab.sim.engine import Batch


@dataclass
class GroupState:
    """One prompt's G rollouts: requests ``lo .. lo+G-1`` of batch ``j``'s :class:`Batch`."""

    j: int
    prompt_id: int
    lo: int
    G: int
    v_dispatch: int
    n_done: int = 0
    status: str = "running"  # running | ready | consumed | dropped | aborted
    step: int = -1  # learner step that consumed / discarded it


@dataclass
class BatchInfo:
    """A dispatched prompt batch: its engine batch, groups and per-rollout last-token version."""

    j: int
    G: int
    batch: Batch
    lengths: np.ndarray  # (n_prompts, G) response tokens
    groups: list[GroupState]
    v_last: np.ndarray  # (n_prompts * G,) v_gen at each rollout's finish
    correct: np.ndarray | None = None  # (n_prompts, G) bool rewards, None without a pass-rate model
    observed: bool = False
    unresolved: int = 0
    generating: int = 0  # groups not yet complete nor discarded


@dataclass
class Ledger:
    """Where every dispatched rollout ended (counts of rollouts) and version spans."""

    dispatched: int = 0
    consumed: int = 0
    dropped: int = 0
    """Rollouts of groups discarded as staler than ``S_max``."""
    aborted: int = 0
    """Rollouts of groups discarded by the over-sampling tail abort."""
    ready: int = 0
    """Finished, waiting in the buffer at the end."""
    in_flight: int = 0
    """Queued or running at the end (or aborted but not yet removed)."""
    spanned_versions: list[int] = field(default_factory=list)
    """Per consumed rollout: last-token version minus dispatch version (partial rollouts)."""

    def as_dict(self) -> dict:
        """Counts plus ``spanned_versions_mean`` / ``_max`` (0 when none consumed)."""
        span = np.asarray(self.spanned_versions, dtype=float)
        return {
            "dispatched": self.dispatched,
            "consumed": self.consumed,
            "dropped": self.dropped,
            "aborted": self.aborted,
            "ready": self.ready,
            "in_flight": self.in_flight,
            "spanned_versions_mean": float(span.mean()) if span.size else 0.0,
            "spanned_versions_max": int(span.max()) if span.size else 0,
        }
