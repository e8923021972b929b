"""Book-keeping of the asynchronous pipelines (:mod:`sim.pipelines.async_pipeline`): one prompt
group, one dispatched batch, the :class:`Ledger` of where every rollout ended, and what
the controller observes of a finished batch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rolloutlab.sim.control.observation import needs, observe_step
from rolloutlab.sim.engine.batch import Batch
from rolloutlab.sim.models.lengths import finish_reasons
from rolloutlab.sim.pipelines.admission import Admission


@dataclass
class GroupState:
    """One prompt's G rollouts: requests ``lo .. lo+G-1`` of batch ``j``'s :class:`Batch`."""

    j: int
    prompt_id: int
    lo: int
    G: int
    v_dispatch: int
    n_done: int = 0
    status: str = "running"  # running | ready | consumed | dropped | aborted | filtered
    step: int = -1  # learner step that consumed / discarded it
    keep: int = 0
    """Samples it trains on: the first ``keep`` of its ``G`` requests to finish
    (``groupover:N/K``, :mod:`sim.pipelines.groupover`); 0 = all ``G``."""
    kept: list[int] = field(default_factory=list)
    """Request indices of the kept samples, in finishing order (trimmed groups only)."""

    def __post_init__(self) -> None:
        if self.keep == 0:
            self.keep = self.G

    @property
    def trimmed(self) -> bool:
        """More samples launched than kept (``groupover``)."""
        return self.keep < self.G


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
    stale_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """(n_prompts * G,) tokens made before the last weight sync each rollout spanned
    (partial pipelines; :func:`sim.pipelines.rollout_versions.record_progress`)."""
    observed: bool = False
    unresolved: int = 0
    generating: int = 0  # groups not yet complete nor discarded

    @classmethod
    def new(cls, j, G, keep, batch, lengths, prompt_ids, v_gen, correct) -> BatchInfo:
        """Batch ``j`` just submitted as ``batch``: ``len(prompt_ids)`` groups of ``G``
        requests each (``keep`` kept, :mod:`sim.pipelines.groupover`), dispatched at ``v_gen``;
        ``lengths`` ``(n_prompts, G)``, ``correct`` ``(n_prompts, G)`` or None."""
        n = len(prompt_ids)
        groups = [
            GroupState(j, int(p), k * G, G, v_gen, keep=keep) for k, p in enumerate(prompt_ids)
        ]
        return cls(
            j,
            G,
            batch,
            lengths,
            groups,
            np.full(n * G, -1, dtype=np.int64),
            correct=correct,
            stale_tokens=np.zeros(n * G, dtype=np.int64),
            unresolved=n,
            generating=n,
        )


@dataclass
class Ledger:
    """Where every dispatched rollout ended (counts of rollouts) and version spans."""

    dispatched: int = 0
    consumed: int = 0
    dropped: int = 0
    """Rollouts of groups discarded as staler than ``S_max``."""
    aborted: int = 0
    """Rollouts of groups discarded by the over-sampling tail abort."""
    filtered: int = 0
    """Rollouts of homogeneous groups filtered by dynamic sampling (not written)."""
    ready: int = 0
    """Finished, waiting in the buffer at the end."""
    in_flight: int = 0
    """Queued or running at the end (or aborted but not yet removed)."""
    spanned_versions: list[int] = field(default_factory=list)
    """Per consumed rollout: last-token version minus dispatch version (partial rollouts)."""
    admission: Admission | None = None
    """The run's :class:`sim.pipelines.admission.Admission` (streaming pipelines), with its event
    log; ``None`` for the batch-serial ones."""

    def as_dict(self) -> dict:
        """Counts plus ``spanned_versions_mean`` / ``_max`` (0 when none consumed)."""
        span = np.asarray(self.spanned_versions, dtype=float)
        return {
            "dispatched": self.dispatched,
            "consumed": self.consumed,
            "dropped": self.dropped,
            "aborted": self.aborted,
            "filtered": self.filtered,
            "ready": self.ready,
            "in_flight": self.in_flight,
            "spanned_versions_mean": float(span.mean()) if span.size else 0.0,
            "spanned_versions_max": int(span.max()) if span.size else 0,
        }

    def account_leftovers(
        self,
        discarded: list[GroupState],
        batches: list[BatchInfo],
        columns_of: Callable[[GroupState, int, str], dict[str, np.ndarray]],
    ) -> list[dict[str, np.ndarray]]:
        """At the end of a run: the finished rows of discarded (dropped or aborted)
        groups, as rollout columns (``columns_of(group, step, status)``); counts them
        and every group still ready or running into the ledger."""
        rows = []
        for g in discarded:
            b, sl = batches[g.j].batch, slice(g.lo, g.lo + g.G)
            done = ~np.isnan(b.t_finish[sl])  # (G,) removed or finished by the end
            cols = columns_of(g, g.step, g.status)
            rows.append({k: v[done] for k, v in cols.items()})
            n_done = int(done.sum())
            if g.status == "dropped":
                self.dropped += n_done
            else:
                self.aborted += n_done
            self.in_flight += g.G - n_done
        for info in batches:
            for g in info.groups:
                if g.status == "ready":
                    self.ready += g.keep
                elif g.status == "running":
                    self.ready += g.n_done
                    self.in_flight += g.G - g.n_done
        return rows


def group_rewards(batches: list[BatchInfo], g: GroupState) -> np.ndarray:
    """(keep,) float rewards of group ``g`` (its kept samples). Raises ValueError when its batch has none (the
    run has no pass-rate model: callers check first)."""
    correct = batches[g.j].correct
    if correct is None:
        raise ValueError(f"batch {g.j} has no rewards (no pass-rate model)")
    return _kept_row(correct, g).astype(np.float64)  # kept samples only (sim.pipelines.groupover)


def rollout_seconds(batches: list[BatchInfo], groups: list[GroupState]) -> float:
    """``sum(t_finish - t_submit)`` over the rollouts of ``groups`` (s)."""
    total = 0.0
    for g in groups:
        b, sl = batches[g.j].batch, slice(g.lo, g.lo + g.G)
        total += float((b.t_finish[sl] - b.t_submit[sl]).sum())
    return total


def observe_resolved(
    controller: Any,
    batches: list[BatchInfo],
    gen_time_s: float,
    step_time_s: float,
    learner_time_s: float | None = None,
    wall_clock_s: float | None = None,
    max_response_length: int | None = None,
) -> None:
    """Hand every batch whose groups are all resolved, and not yet observed, to
    :func:`sim.control.observation.observe_step`: lengths, rewards and prompt ids of its groups
    that were generated to the end (consumed, dropped as stale or filtered), with the
    times (s) of the learner step that resolved it; finish reasons (``"length"`` at
    ``max_response_length``, else ``"stop"``) when the cap is given and the controller
    reads them."""
    for info in batches:
        if info.unresolved == 0 and not info.observed:
            info.observed = True
            ks = [
                k
                for k, g in enumerate(info.groups)
                if g.status in ("consumed", "dropped", "filtered")
            ]
            kept = [_kept_row(info.lengths, info.groups[k]) for k in ks]
            reasons = None
            if max_response_length is not None and needs(controller, "finish_reasons"):
                reasons = finish_reasons(np.array(kept), max_response_length)
            observe_step(
                controller,
                [row.tolist() for row in kept],
                finish_reasons=reasons,
                learner_time_s=learner_time_s,
                wall_clock_s=wall_clock_s,
                rewards=None
                if info.correct is None
                else np.array(
                    [_kept_row(info.correct, info.groups[k]) for k in ks], dtype=np.float64
                ).reshape(len(ks), -1),
                gen_time_s=gen_time_s,
                step_time_s=step_time_s,
                prompt_ids=np.array([info.groups[k].prompt_id for k in ks], dtype=np.int64),
            )


def _kept_row(table: np.ndarray, g: GroupState) -> np.ndarray:
    """Group ``g``'s row of a batch's ``(n_prompts, G)`` table, kept samples only."""
    row = table[g.lo // g.G]
    return row[np.asarray(g.kept) - g.lo] if g.trimmed else row
