"""Metrics of rollout traces, defined once (see docs/metrics.md) and used everywhere.

Every function here takes rows of the trace schema (:mod:`sim.trace.schema`) or plain arrays
of response lengths, so the simulator, the real runners, the controllers and the
analysis compute each number with the same code.

Clock: seconds from run start (trace times). Lengths: tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
from rolloutlab.sim.trace.scan import pipeline_counts, step_chunks, worker_chunks
from rolloutlab.sim.trace.staleness_metrics import (  # noqa: F401  (re-exported)
    consumed,
    discarded_counts,
    drop_bias,
    staleness,
    staleness_histogram,
)

DEFAULT_TAU = 4.0
"""Straggler threshold on max/median used when a caller gives none (SAGC's tau)."""


def straggler_ratio(lengths: np.ndarray | Sequence[float] | Sequence[Sequence[float]]) -> float:
    """``max(L) / median(L)`` over all response lengths given (SAGC, PAPERS.md §1).

    Args:
        lengths: response lengths in tokens, any shape (e.g. ``(n_prompts, G)``) or a
            ragged list of per-prompt lists; all values are pooled.
    Returns: the ratio (>= 1 for positive lengths).
    Raises: ValueError on no lengths, a negative length, or a zero median.
    """
    flat = _flatten(lengths)
    if flat.size == 0:
        raise ValueError("straggler_ratio: no response lengths")
    if (flat < 0).any():
        raise ValueError("straggler_ratio: negative response length")
    med = float(np.median(flat))
    if med <= 0:
        raise ValueError("straggler_ratio: median response length is 0")
    return float(flat.max() / med)


def group_straggler_ratio(lengths: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
    """Per-group variant: ``max / median`` within each prompt's group, shape ``(n_prompts,)``.

    ``lengths``: ``(n_prompts, G)`` array (vectorised) or a ragged list of groups.
    Raises ValueError as :func:`straggler_ratio` for a group (no lengths, a negative
    length, a zero median)."""
    if not isinstance(lengths, np.ndarray) and len({len(g) for g in lengths}) == 1:
        lengths = np.asarray(lengths, dtype=float)  # equal groups: one vectorised pass
    if isinstance(lengths, np.ndarray) and lengths.ndim == 2 and lengths.shape[1] > 0:
        L = lengths.astype(float)
        med = np.median(L, axis=1)  # (n_prompts,)
        if (L < 0).any() or (med <= 0).any():
            raise ValueError("group_straggler_ratio: a negative length or a zero group median")
        return L.max(axis=1) / med
    return np.array([straggler_ratio(g) for g in lengths])


def group_straggler_share(
    lengths: Sequence[Sequence[float]] | np.ndarray, tau: float = DEFAULT_TAU
) -> float:
    """Group straggler share: the fraction of a step's groups whose own ``max/median``
    exceeds ``tau`` (docs/metrics.md). Unlike :func:`straggler_ratio`, whose maximum over
    ``B x G`` lengths passes any ``tau`` once ``B x G`` is in the thousands, it stays
    between 0 and 1 and grows with ``G`` at any ``B``."""
    return float(np.mean(group_straggler_ratio(lengths) > tau))


READINGS = ("step", "group")
"""Straggler readings: ``step`` = :func:`straggler_ratio` against ``tau``; ``group`` =
:func:`group_straggler_share` against ``level``."""


def straggler_reading(
    lengths, tau: float, reading: str = "step", level: float = 0.5
) -> tuple[float, int]:
    """``(value, S_t)`` of one step: ``step`` reading: value = :func:`straggler_ratio`,
    ``S_t = 1[value > tau]`` (PAPERS.md §1); ``group`` reading: value =
    :func:`group_straggler_share` at ``tau``, ``S_t = 1[value > level]``.
    Raises ValueError for another reading."""
    if reading == "step":
        value = straggler_ratio(lengths)
        return value, int(value > tau)
    if reading == "group":
        value = group_straggler_share(lengths, tau)
        return value, int(value > level)
    raise ValueError(f"straggler reading must be one of {READINGS}, got {reading!r}")


def straggler_event(lengths, tau: float = DEFAULT_TAU) -> bool:
    """``S_t = 1[straggler_ratio(lengths) > tau]`` (PAPERS.md §1)."""
    return straggler_ratio(lengths) > tau


def _flatten(lengths) -> np.ndarray:
    if isinstance(lengths, np.ndarray):
        return lengths.astype(float).ravel()
    if len(lengths) and len({len(g) if hasattr(g, "__len__") else -1 for g in lengths}) == 1:
        return np.asarray(lengths, dtype=float).ravel()  # equal groups: one conversion
    parts = [np.atleast_1d(np.asarray(g, dtype=float)).ravel() for g in lengths]
    return np.concatenate(parts) if parts else np.zeros(0)


def slot_idle_fraction(t_finish_rel: np.ndarray) -> float:
    """``sum_i (makespan - f_i) / (n * makespan)`` with ``f_i`` finish times from step start.

    ``makespan = max_i f_i``. Equals ``1 - mean(f) / max(f)``; in ``[0, 1)``; 0 for
    a step whose rollouts all finish together (or a zero-length step).
    """
    f = np.asarray(t_finish_rel, dtype=float)
    span = float(f.max()) if f.size else 0.0
    if span <= 0:
        return 0.0
    return float(np.sum(span - f) / (f.size * span))


def busy_union_s(starts: np.ndarray, ends: np.ndarray) -> float:
    """Length (s) of the union of intervals ``[starts_i, ends_i]``."""
    if len(starts) == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    s, e = np.asarray(starts)[order], np.asarray(ends)[order]
    # running max of ends: an interval opens a new block when it starts after all before it end
    run_end = np.maximum.accumulate(e)
    new_block = np.empty(len(s), dtype=bool)
    new_block[0] = True
    new_block[1:] = s[1:] > run_end[:-1]
    block_id = np.cumsum(new_block) - 1
    block_start = s[new_block]
    block_end = np.zeros(block_id[-1] + 1)
    np.maximum.at(block_end, block_id, e)
    return float(np.sum(block_end - block_start))


def step_metrics(
    rollouts: pl.DataFrame,
    tau: float = DEFAULT_TAU,
    n_workers: int | None = None,
    group_share: bool = False,
) -> pl.DataFrame:
    """One row per step of a rollout table (schema: :data:`sim.trace.schema.ROLLOUT_SCHEMA`).

    Columns: ``step, n_rollouts, group_size, makespan_s, slot_idle_frac,
    device_idle_s, straggler_ratio, straggler, response_length/mean,
    response_length/max, response_length/min, response_length/clip_ratio,
    response_tokens`` (and ``group_straggler_share`` with ``group_share``), over the rollouts the step trained on (rows with
    ``finish_reason == "abort"`` are left out). Definitions in docs/metrics.md:
    - makespan: ``max(t_finish) - min(t_submit)`` over the step's rollouts;
    - slot idle fraction: :func:`slot_idle_fraction` of ``t_finish - min(t_submit)``;
    - device idle time: ``sum_w (makespan - busy_w)``, ``busy_w`` the length of the
      union of ``[t_first_token_i, t_finish_i]`` over the rollouts run on worker ``w``
      (a sequence is running from its first token to its last); workers with no
      rollout count as idle for the whole makespan when ``n_workers`` is given;
    - straggler ratio / event: :func:`straggler_ratio` of ``response_tokens`` vs ``tau``;
    - group straggler share (``group_share=True``): the share of the step's groups (``prompt_id``) whose own
      ``max/median`` exceeds ``tau`` (:func:`group_straggler_share`; a group with a zero
      median and a positive max counts as straggling).
    """
    rollouts = consumed(rollouts)
    if rollouts.height == 0:
        raise ValueError("step_metrics: the rollout table has no consumed rollout")
    if (rollouts["response_tokens"] < 0).any():
        raise ValueError("step_metrics: negative response length")
    # one vectorised pass per quantity (why: a Python loop over steps made metrics, not
    # simulation, the cost of a sweep)
    L = pl.col("response_tokens")
    per_step = rollouts.group_by("step").agg(
        pl.len().alias("n_rollouts"),
        pl.col("group_size").max(),
        pl.col("t_submit").min().alias("t0"),
        pl.col("t_finish").max().alias("t1"),
        pl.col("t_finish").sum().alias("finish_sum"),
        L.mean().alias("response_length/mean"),
        L.max().cast(pl.Float64).alias("response_length/max"),
        L.min().cast(pl.Float64).alias("response_length/min"),
        (pl.col("finish_reason") == "length").mean().alias("response_length/clip_ratio"),
        L.sum().alias("response_tokens"),
        L.median().alias("median"),
        pl.col("worker").n_unique().alias("workers_used"),
    )
    share = (
        rollouts.group_by("step", "prompt_id")
        .agg(
            # a zero median straggles when its max is positive (ratio inf), an all-zero
            # group does not (polars orders NaN above every number, so it is spelled out)
            pl.when(L.median() > 0)
            .then(L.max() / L.median() > tau)
            .otherwise(L.max() > 0)
            .alias("straggling")
        )
        .group_by("step")
        .agg(pl.col("straggling").mean().alias("group_straggler_share"))
    )
    if group_share:  # a group_by over (step, prompt): ~1/3 more time, so only when asked
        per_step = per_step.join(share, on="step")
    span = pl.col("t1") - pl.col("t0")
    idle = _worker_idle(rollouts).join(
        per_step.select("step", (pl.col("t1") - pl.col("t0")).alias("span")), on="step"
    )
    idle = idle.group_by("step").agg(
        (pl.col("span") - pl.col("busy")).clip(lower_bound=0.0).sum().alias("device_idle_s")
    )
    ratio = (
        pl.when(pl.col("median") > 0)
        .then(pl.col("response_length/max") / pl.col("median"))
        .otherwise(float("inf"))
    )
    # slot idle: sum_i (span - (f_i - t0)) / (n span) = (n t1 - sum f) / (n span); 0 if span <= 0
    slot_idle = (
        pl.when(span > 0)
        .then(
            (pl.col("n_rollouts") * pl.col("t1") - pl.col("finish_sum"))
            / (pl.col("n_rollouts") * span)
        )
        .otherwise(0.0)
    )
    unused = (
        (n_workers - pl.col("workers_used")).clip(lower_bound=0) * span
        if n_workers is not None
        else 0.0
    )
    return (
        per_step.join(idle, on="step")
        .sort("step")
        .select(
            pl.col("step"),
            pl.col("n_rollouts").cast(pl.Int64),
            pl.col("group_size").cast(pl.Int64),
            span.alias("makespan_s"),
            slot_idle.alias("slot_idle_frac"),
            (pl.col("device_idle_s") + unused).alias("device_idle_s"),
            ratio.alias("straggler_ratio"),
            (ratio > tau).alias("straggler"),
            "response_length/mean",
            "response_length/max",
            "response_length/min",
            "response_length/clip_ratio",
            pl.col("response_tokens").cast(pl.Int64),
            *([pl.col("group_straggler_share").cast(pl.Float64)] if group_share else []),
        )
    )


def _worker_idle(rollouts: pl.DataFrame) -> pl.DataFrame:
    """``(step, worker, busy)``: the length (s) of the union of ``[t_first_token,
    t_finish]`` per step and worker (:func:`busy_union_s`, vectorised: an interval opens a
    new block when it starts after every earlier one of its group has ended)."""
    keys = ["step", "worker"]
    df = rollouts.select(*keys, "t_first_token", "t_finish").sort(*keys, "t_first_token")
    prev_end = pl.col("t_finish").cum_max().shift(1).over(keys)
    df = df.with_columns(
        (prev_end.is_null() | (pl.col("t_first_token") > prev_end))
        .cum_sum()
        .over(keys)
        .alias("block")
    )
    blocks = df.group_by(*keys, "block").agg(
        pl.col("t_first_token").min().alias("s"), pl.col("t_finish").max().alias("e")
    )
    return blocks.group_by(keys).agg((pl.col("e") - pl.col("s")).sum().alias("busy"))


def learner_idle_fraction(steps: pl.DataFrame, skip: int = 0) -> float:
    """``1 - sum(train_time + sync_time - sync_drain_s) / span``: the share of time the
    learner waits for rollouts (a drain sync's wait for in-flight rollouts is waiting;
    ``sync_drain_s`` null or absent counts 0). ``span`` runs from the first ``t_start`` (``skip = 0``) or from the
    ``t_end`` of step ``skip - 1`` (steady state: leaves out the pipeline fill) to the
    last ``t_end``; the sums are over steps ``>= skip``. NaN for a zero span."""
    st = steps.sort("step")
    span0 = float(st["t_start"].min()) if skip == 0 else float(st["t_end"][skip - 1])
    rest = st[skip:]
    span = float(rest["t_end"].max()) - span0
    busy_s = rest["train_time"] + rest["sync_time"]
    if "sync_drain_s" in rest.columns:
        busy_s = busy_s - rest["sync_drain_s"].fill_null(0.0)
    busy = float(busy_s.sum())
    return 1.0 - busy / span if span > 0 else float("nan")


def generator_idle_fraction(
    rollouts: pl.DataFrame | pl.LazyFrame,
    steps: pl.DataFrame,
    n_workers: int | None = None,
    workers_per_read: int = 16,
) -> float:
    """``1 - sum_w busy_w / (W * wall)``: ``busy_w`` the union of ``[t_first_token,
    t_finish]`` of every rollout (aborted ones included) run on worker ``w``, ``wall`` as
    in :func:`run_summary`, ``W = n_workers`` (default: workers seen in the trace).
    A rollout paused across a weight sync or a colocated training phase counts as busy
    while paused, so the fraction is a lower bound there.

    A lazy scan is read ``workers_per_read`` workers at a time, busy times summed in
    worker order."""
    wall = float(steps["t_end"].max() - steps["t_start"].min()) if steps.height else 0.0
    lf = rollouts.lazy()
    W = n_workers or lf.select(pl.col("worker").n_unique()).collect().item()
    if wall <= 0 or W == 0:
        return float("nan")
    busy = 0.0
    for _, df in worker_chunks(lf, ("t_first_token", "t_finish"), workers_per_read):
        busy += busy_union_s(df["t_first_token"].to_numpy(), df["t_finish"].to_numpy())
    return 1.0 - busy / (W * wall)


def run_summary(
    rollouts: pl.DataFrame | pl.LazyFrame, steps: pl.DataFrame, tau: float = DEFAULT_TAU
) -> dict:
    """Whole-run numbers of one run: :func:`steps_summary` of :func:`scan_step_metrics`.
    Pipeline metrics are in :func:`pipeline_summary`. Raises ValueError as :func:`step_metrics`."""
    return steps_summary(scan_step_metrics(rollouts, tau), steps)


def scan_step_metrics(
    rollouts: pl.DataFrame | pl.LazyFrame, tau: float = DEFAULT_TAU
) -> pl.DataFrame:
    """:func:`step_metrics`; a lazy scan is read a few whole steps at a time
    (:func:`sim.trace.scan.step_chunks`): the same rows, in bounded memory."""
    if isinstance(rollouts, pl.DataFrame):
        return step_metrics(rollouts, tau)
    parts = [step_metrics(df, tau) for df in step_chunks(consumed(rollouts)) if df.height]
    if not parts:
        raise ValueError("step_metrics: the rollout table has no consumed rollout")
    return pl.concat(parts)


def steps_summary(per_step: pl.DataFrame, steps: pl.DataFrame) -> dict:
    """Whole-run numbers from :func:`step_metrics` rows and the step table of one run.

    Returns a dict: ``steps, wall_clock_s`` (last ``t_end`` - first ``t_start``),
    ``gen_time_s`` (sum of step ``gen_time``), ``train_time_s``, ``sync_time_s``,
    ``slot_idle_frac`` (rollout-weighted mean over steps), ``device_idle_s``,
    ``straggler_rate`` (mean of the per-step straggler event), ``mean_G``
    (mean group size over steps), ``rollouts``, ``response_tokens``, ``tokens_per_s``
    (response tokens / wall clock), over consumed rollouts (:func:`consumed`).
    """
    wall = float(steps["t_end"].max() - steps["t_start"].min()) if steps.height else 0.0
    tokens = int(per_step["response_tokens"].sum())
    n = per_step["n_rollouts"].to_numpy()
    return {
        "steps": int(steps.height),
        "wall_clock_s": wall,
        "gen_time_s": float(steps["gen_time"].sum()),
        "train_time_s": float(steps["train_time"].sum()),
        "sync_time_s": float(steps["sync_time"].sum()),
        "slot_idle_frac": float(np.average(per_step["slot_idle_frac"].to_numpy(), weights=n)),
        "device_idle_s": float(per_step["device_idle_s"].sum()),
        "straggler_rate": float(per_step["straggler"].mean()),
        "mean_G": float(per_step["group_size"].mean()),
        "rollouts": int(n.sum()),
        "response_tokens": tokens,
        "tokens_per_s": tokens / wall if wall > 0 else float("nan"),
    }


STEP_PHASES = {
    "gen_s": "gen_time",
    "train_s": "train_time",
    "sync_s": "sync_time",
    "reward_wait_s": "reward_wait_s",
    "periodic_s": "periodic_s",
}
"""The phases of a step table averaged by :func:`phase_means`: printed name -> column."""


def phase_means(steps: pl.DataFrame) -> pl.DataFrame:
    """Mean seconds per step of each run of a step table (several runs: ``sim`` with
    several controllers or pipelines), so that no run's phase cost is read off an average
    over runs of other G.

    Returns one row per ``run_id`` in order of first appearance: ``run_id``, ``steps``,
    ``step_s`` (mean ``t_end - t_start``) and the :data:`STEP_PHASES` the table has (means
    of ``gen_time``, ``train_time``, ``sync_time``, ``reward_wait_s``, ``periodic_s``; null
    where a column is all null, e.g. no priced step phases). The phases sum to ``step_s``
    only in a synchronous pipeline: an asynchronous one overlaps them.
    """
    phases = {k: v for k, v in STEP_PHASES.items() if v in steps.columns}
    return steps.group_by("run_id", maintain_order=True).agg(
        pl.len().alias("steps"),
        (pl.col("t_end") - pl.col("t_start")).mean().alias("step_s"),
        *(pl.col(col).mean().alias(name) for name, col in phases.items()),
    )


def pipeline_summary(
    rollouts: pl.DataFrame | pl.LazyFrame,
    steps: pl.DataFrame,
    max_staleness: int = 0,
    n_workers: int | None = None,
) -> dict:
    """Pipeline numbers of one run: ``learner_idle_frac`` (whole run),
    ``learner_idle_frac_steady`` (from the end of step 0), ``generator_idle_frac``,
    ``staleness_mean``, ``staleness_max`` (consumed rollouts, from ``policy_version``:
    the last token's version), ``dropped``, ``aborted`` (:func:`discarded_counts`),
    ``len_consumed_over_generated`` (:func:`drop_bias`) and the consumed rollouts' mean
    staleness counted from dispatch and from the first token
    (``staleness_dispatch_mean``, ``staleness_first_token_mean``; docs/pipelines.md;
    ``policy_version`` stands in where those versions are null or absent).

    ``rollouts`` may be a lazy scan: one aggregation pass
    (:func:`sim.trace.scan.pipeline_counts`) and :func:`generator_idle_fraction`."""
    c = pipeline_counts(rollouts.lazy(), max_staleness)
    gen, cons = c["gen_mean"], _nan(c["cons_mean"])
    return {
        "learner_idle_frac": learner_idle_fraction(steps),
        "learner_idle_frac_steady": learner_idle_fraction(steps, skip=1)
        if steps.height > 1
        else float("nan"),
        "generator_idle_frac": generator_idle_fraction(rollouts, steps, n_workers),
        "staleness_mean": _nan(c["s_mean"]),
        "staleness_max": int(c["s_max"] or 0),
        "dropped": int(c["dropped"]),
        "aborted": int(c["n_abort"]) - int(c["dropped"]),
        "len_consumed_over_generated": cons / gen if gen and gen > 0 else float("nan"),
        "staleness_dispatch_mean": _nan(c["lag_dispatch"]),
        "staleness_first_token_mean": _nan(c["lag_first_token"]),
    }


def _nan(x: float | None) -> float:
    return float("nan") if x is None else float(x)


# -- what a tail cut removed, per learner step: the step table's ``cut_*`` columns --
# Over-provisioning pipelines (``oversample:R``, ``groupover:N/K``, both at once:
# :mod:`sim.pipelines.spec`) abort the slowest rollouts once a step has what it needs; the
# trace keeps them as ``abort`` rows of the step that cut them, with the tokens made
# (``response_tokens``) and, in the simulator, the length they would have had
# (``would_be_response_tokens``). Per step this gives ``cut_rollouts`` (rows aborted),
# ``cut_tokens`` (tokens spent on them) and ``cut_len_bias``: the mean length trained on
# over the mean would-be length of everything generated for the step (consumed + cut at
# their would-be length; < 1: the cut favours short responses; the per-run form is
# :func:`drop_bias`).

CUT_COLUMNS = ("cut_rollouts", "cut_tokens", "cut_len_bias")
"""Step-table columns filled by :func:`with_cut_columns` (nullable, :mod:`sim.trace.schema`)."""


def with_cut_columns(steps: pl.DataFrame, rollouts: pl.DataFrame) -> pl.DataFrame:
    """``steps`` with :data:`CUT_COLUMNS` from ``rollouts`` (trace schema; ``abort`` rows
    counted as cut, stale drops included). A step with nothing cut gets 0, 0 and 1.0
    when it trained on anything (NaN-free), null when it has no rollout row."""
    ab = pl.col("finish_reason") == "abort"
    would_be = pl.coalesce("would_be_response_tokens", "response_tokens").cast(pl.Float64)
    per = rollouts.group_by("step").agg(
        ab.sum().cast(pl.Int64).alias("cut_rollouts"),
        pl.col("response_tokens").filter(ab).sum().cast(pl.Int64).alias("cut_tokens"),
        (pl.col("response_tokens").filter(~ab).cast(pl.Float64).mean() / would_be.mean()).alias(
            "cut_len_bias"
        ),
    )
    return (
        steps.drop([c for c in CUT_COLUMNS if c in steps.columns])
        .join(per, on="step", how="left")
        .select([*steps.columns, *(c for c in CUT_COLUMNS if c not in steps.columns)])
    )
