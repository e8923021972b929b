"""Rollout-table rows of one group of an asynchronous pipeline (:mod:`sim.pipelines.async_pipeline`).

A consumed group gives its trained rows (a ``groupover`` group: its kept samples only,
:mod:`sim.pipelines.groupover`); a dropped, aborted or filtered one gives all its rows as
``finish_reason = "abort"`` with ``response_tokens`` = tokens made. Versions: a
non-partial rollout's ``policy_version`` is its dispatch version; a partial rollout's
is the version of its last token, and a discarded partial group is as old as its
oldest sample. The version-3 columns come from :func:`sim.pipelines.rollout_versions.version_columns`.
Also the step's reward columns (:func:`reward_columns`).
"""

from __future__ import annotations

import numpy as np
from rolloutlab.sim.models.reward_metrics import step_reward_columns
from rolloutlab.sim.pipelines.async_dynamic import AsyncRounds
from rolloutlab.sim.pipelines.async_ledger import (
    BatchInfo,
    GroupState,
    group_rewards,
    rollout_seconds,
)
from rolloutlab.sim.pipelines.groupover import kept_mask
from rolloutlab.sim.pipelines.rollout_versions import VersionClock, version_columns
from rolloutlab.sim.pipelines.sync import BatchRows, rollout_columns


def group_rows(
    info: BatchInfo,
    g: GroupState,
    step: int,
    status: str,
    run_id: str,
    max_response_length: int,
    partial: bool,
    clock: VersionClock,
) -> dict[str, np.ndarray]:
    """Rollout columns (trace schema) of group ``g`` of batch ``info``, resolved as
    ``status`` (``consumed | dropped | aborted | filtered``) by learner ``step``; ``(rows,)``
    arrays, ``rows = keep`` for a consumed group, else its ``G`` requests."""
    sl = slice(g.lo, g.lo + g.G)
    version = info.v_last[sl] if partial else g.v_dispatch
    cols = rollout_columns(
        run_id,
        step,
        g.G,
        np.array([g.prompt_id]),
        BatchRows(info.batch, sl),
        version,
        step,
        max_response_length,
        correct=None if info.correct is None else info.correct[g.lo // g.G][None],
    )
    cols.update(version_columns(info, sl, g.v_dispatch, partial, clock))
    if status == "consumed":
        return {k: v[kept_mask(g)] for k, v in cols.items()} if g.trimmed else cols
    b = info.batch
    cols["response_tokens"] = np.where(b.aborted[sl], b.abort_tokens[sl], b.response_tokens[sl])
    cols["finish_reason"] = np.full(g.G, "abort", dtype=object)
    if partial:  # a discarded group is as old as its oldest sample
        oldest = int(info.v_last[sl].min()) if status == "dropped" else g.v_dispatch
        cols["policy_version"] = np.full(g.G, oldest, dtype=np.int64)
    return cols


def reward_columns(
    rewards: list[np.ndarray] | None,
    n_taken: int,
    B: int,
    rounds: AsyncRounds | None,
    batches: list[BatchInfo],
    filtered: list[GroupState],
) -> dict | None:
    """Step reward columns (:func:`sim.models.reward_metrics.step_reward_columns`) of the
    ``n_taken`` trained groups' ``rewards``, plus, with dynamic sampling (``rounds``),
    the ``filtered`` groups, the rounds used, the rollout seconds wasted on filtered
    groups and whether the step ended with fewer than ``B``; None without rewards."""
    if rewards is None:
        return None
    if rounds is None:
        return step_reward_columns(rewards, n_taken)
    wasted = rollout_seconds(batches, filtered)
    groups = rewards + [group_rewards(batches, g) for g in filtered]
    return step_reward_columns(groups, n_taken, len(rounds.seen), wasted, n_taken < B)
