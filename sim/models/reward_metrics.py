"""Reward metrics of a run, defined once (docs/metrics.md, "Rewards and learning").

A group is *informative* when its rewards are not all equal: only then does GRPO's
group-normalised advantage differ from zero (DAPO, arXiv 2503.14476, §3.2). For
Bernoulli rewards with pass rate ``p`` and group size ``G`` the informative probability
is ``1 - p^G - (1 - p)^G`` (:func:`informative_prob`).

The simulator fills the step-table columns from the groups it generated
(:func:`step_reward_columns`); :func:`informative_by_step` computes the same numbers
from a rollout table that carries ``reward`` (real runs).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl


def informative_prob(p, G) -> np.ndarray:
    """``1 - p^G - (1 - p)^G``: probability that ``G`` Bernoulli(``p``) rewards are not
    all equal (closed form; arrays broadcast)."""
    p = np.asarray(p, dtype=np.float64)
    return 1.0 - p**G - (1.0 - p) ** G


def informative(rewards: np.ndarray) -> np.ndarray:
    """``(n,)`` bool: group ``i`` of ``rewards`` (n, G) has rewards that are not all equal."""
    r = np.asarray(rewards)
    return (r != r[:, :1]).any(axis=1)


def step_reward_columns(
    groups: Sequence[np.ndarray] | np.ndarray,
    kept: int,
    rounds: int = 1,
    wasted_rollout_s: float = 0.0,
    abort: bool = False,
) -> dict:
    """Step-table reward columns of one learner step (trace schema v2).

    ``groups``: the rewards of every complete group generated for the step (kept or
    filtered by dynamic sampling), one ``(G_i,)`` array each, or an ``(n, G)`` array. Returns ``reward_mean``
    (mean reward over those rollouts: an estimate of the generating policy's accuracy,
    not of the filtered batch's), ``informative_groups`` (of those groups, the ones
    whose rewards are not all equal), ``informative_frac`` (= informative / generated;
    null for no group), ``gen_rounds``, ``generated_groups``, ``kept_groups`` (=
    ``kept``, trained), ``wasted_rollout_s`` and ``dynamic_sampling_abort``.
    """
    n = len(groups)
    if n:
        flat = np.concatenate([np.asarray(g, dtype=np.float64).ravel() for g in groups])
        if isinstance(groups, np.ndarray):  # (n, G): one group size
            n_inf = int(informative(groups).sum())
        else:  # groups of several sizes (asynchronous pipelines)
            n_inf = int(sum(informative(np.asarray(g)[None])[0] for g in groups))
    return {
        "reward_mean": float(flat.mean()) if n else None,
        "informative_groups": n_inf if n else 0,
        "informative_frac": n_inf / n if n else None,
        "gen_rounds": int(rounds),
        "generated_groups": n,
        "kept_groups": int(kept),
        "wasted_rollout_s": float(wasted_rollout_s),
        "dynamic_sampling_abort": bool(abort),
    }


def informative_by_step(rollouts: pl.DataFrame) -> pl.DataFrame:
    """Per step of a rollout table with rewards: ``step, groups, informative_groups,
    informative_frac, reward_mean`` over the consumed rows (``finish_reason != "abort"``)
    with a non-null ``reward``; a group is the rows of one ``(step, prompt_id)``."""
    df = rollouts.filter((pl.col("finish_reason") != "abort") & pl.col("reward").is_not_null())
    per_group = df.group_by("step", "prompt_id").agg(
        (pl.col("reward").n_unique() > 1).alias("informative"),
        pl.col("reward").sum().alias("r_sum"),
        pl.len().alias("n"),
    )
    return (
        per_group.group_by("step")
        .agg(
            pl.len().cast(pl.Int64).alias("groups"),
            pl.col("informative").sum().cast(pl.Int64).alias("informative_groups"),
            (pl.col("r_sum").sum() / pl.col("n").sum()).alias("reward_mean"),
        )
        .with_columns((pl.col("informative_groups") / pl.col("groups")).alias("informative_frac"))
        .sort("step")
    )


LEARNING_COLUMNS = ("informative_frac", "final_reward", "time_to_target_s")
"""Summary columns of a run with rewards (:func:`learning_summary`)."""

DYNAMIC_SAMPLING_COLUMNS = ("gen_rounds_mean", "dynamic_sampling_abort_frac", "wasted_rollout_s")
"""Summary columns of a run with dynamic sampling (:func:`dynamic_sampling_summary`)."""


def learning_summary(steps: pl.DataFrame, target: float | None = None) -> dict:
    """Whole-run reward numbers from a step table with the v2 columns.

    ``informative_frac``: ``sum(informative_groups) / sum(generated_groups)`` over the
    run; ``final_reward``: :func:`rolloutlab.sim.models.learning.final_reward`;
    ``time_to_target_s``: :func:`rolloutlab.sim.models.learning.time_to_target` at ``target``,
    ``None`` when not reached or no target. NaN/None when the table has no rewards.
    """
    from rolloutlab.sim.models.learning import final_reward, time_to_target  # (why: owned there)

    has = steps.filter(pl.col("reward_mean").is_not_null())
    if has.height == 0:
        return {"informative_frac": None, "final_reward": None, "time_to_target_s": None}
    gen = int(has["generated_groups"].sum())
    return {
        "informative_frac": float(has["informative_groups"].sum()) / gen if gen else None,
        "final_reward": float(final_reward(has)),
        "time_to_target_s": None if target is None else time_to_target(has, target),
    }


def dynamic_sampling_summary(steps: pl.DataFrame) -> dict:
    """Whole-run dynamic-sampling numbers from a step table with the v2 columns.

    ``gen_rounds_mean``: mean generation rounds per learner step; ``dynamic_sampling_abort_frac``:
    fraction of steps that reached ``max_gen_batches`` short of B informative groups;
    ``wasted_rollout_s``: rollout-seconds spent on groups that were generated and dropped,
    summed over the run (s). ``None`` each when the table has no such rows (why: with
    dynamic sampling, ``rollouts`` and ``tokens_per_s`` count trained rollouts only, so
    these say what the filter cost).
    """
    has = steps.filter(pl.col("gen_rounds").is_not_null())
    if has.height == 0:
        return dict.fromkeys(DYNAMIC_SAMPLING_COLUMNS)
    return {
        "gen_rounds_mean": float(has["gen_rounds"].mean()),
        "dynamic_sampling_abort_frac": float(has["dynamic_sampling_abort"].cast(pl.Float64).mean()),
        "wasted_rollout_s": float(has["wasted_rollout_s"].fill_null(0.0).sum()),
    }
