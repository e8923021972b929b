"""Figures (seaborn/matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import seaborn as sns
from rolloutlab.sim.trace.metrics import scan_step_metrics


def comparison_figure(
    rollouts: pl.DataFrame | pl.LazyFrame,
    steps: pl.DataFrame,
    path: str | Path,
    tau: float,
    target: float | None = None,
) -> None:
    """Three panels, one line per controller (``run_id``): G per step, straggler ratio
    per step (with the threshold ``tau``), cumulative wall-clock (h); a fourth when the
    steps carry rewards: reward (``reward_mean``, trailing mean over 10 steps) against
    wall-clock (h), with the ``target`` reward if given. ``rollouts`` may be a lazy scan
    (read back one run and a few steps at a time). Writes ``path``."""
    order = steps["run_id"].unique(maintain_order=True).to_list()  # same colour per controller
    lf = rollouts.lazy()  # a scan is read a few steps at a time
    m = pl.concat(
        scan_step_metrics(lf.filter(pl.col("run_id") == run_id), tau).with_columns(
            pl.lit(run_id).alias("controller")
        )
        for run_id in order
    )
    wall = steps.sort("run_id", "step").with_columns(
        ((pl.col("t_end") - pl.col("t_start").min().over("run_id")) / 3600).alias("wall_clock_h"),
        pl.col("run_id").alias("controller"),
    )
    sns.set_theme(style="whitegrid", context="paper")
    rewards = "reward_mean" in steps.columns and steps["reward_mean"].is_not_null().any()
    n = 4 if rewards else 3
    fig, axes = plt.subplots(n, 1, figsize=(8, 3 * n))
    for ax in axes[1:3]:
        ax.sharex(axes[0])  # (why: the reward panel's x axis is wall-clock, not steps)
    _lines(m, "step", "group_size", order, axes[0], drawstyle="steps-post")
    axes[0].set_ylabel("group size G")
    _lines(m, "step", "straggler_ratio", order, axes[1], legend=False, alpha=0.7)
    axes[1].axhline(tau, color="k", ls="--", lw=1, label=f"tau = {tau:g}")
    axes[1].set_ylabel("straggler ratio max/median")
    axes[1].legend(loc="upper right")
    _lines(wall, "step", "wall_clock_h", order, axes[2], legend=False)
    axes[2].set_ylabel("cumulative wall-clock (h)")
    axes[2].set_xlabel("learner step")
    for ax in axes[:2]:  # shared step axis: labelled once, as with sharex=True
        ax.set_xlabel("")
        ax.tick_params(labelbottom=False)
    if rewards:
        _reward_panel(wall, order, axes[3], target)
    _save(fig, path, dpi=120)


def sweep_figure(runs: pl.DataFrame, path: str | Path, title: str = "") -> None:
    """Two panels over the prompt batch B (log2 axis, ticks at the swept values), one line
    per controller (colour) and engine layout (line style: workers, and ``max_num_seqs``
    when it varies), mean and sd over seeds: wall clock (h) and throughput (tokens/s).
    ``runs``: :func:`sim.studies.sweep.run_sweep` rows. Writes ``path``."""
    several = runs["max_num_seqs"].n_unique() > 1
    layout = (
        pl.format("workers={}, max_num_seqs={}", "workers", "max_num_seqs")
        if several
        else pl.format("workers={}", "workers")
    )
    df = runs.with_columns(
        (pl.col("wall_clock_s") / 3600).alias("wall_clock_h"), layout.alias("engine layout")
    ).to_pandas()
    order = list(dict.fromkeys(runs["controller"].to_list()))
    sns.set_theme(style="whitegrid", context="paper")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ticks = sorted(set(runs["prompts"].to_list()))
    for ax, y, label in (
        (axes[0], "wall_clock_h", "wall clock (h)"),
        (axes[1], "tokens_per_s", "tokens/s"),
    ):
        sns.lineplot(
            df,
            x="prompts",
            y=y,
            hue="controller",
            hue_order=order,
            style="engine layout",
            markers=True,
            errorbar="sd",
            ax=ax,
            legend=ax is axes[1],
        )
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("prompt batch B")
        ax.set_ylabel(label)
    axes[1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8)
    if title:
        fig.suptitle(title)
    _save(fig, path, dpi=120)


def _reward_panel(wall: pl.DataFrame, order: list[str], ax, target: float | None) -> None:
    """Reward (trailing mean of ``reward_mean`` over 10 full steps, as ``time_to_target``
    reads it) against cumulative wall-clock (h), one line per controller."""
    df = wall.with_columns(
        pl.col("reward_mean").rolling_mean(10, min_samples=10).over("controller").alias("reward")
    )
    _lines(df, "wall_clock_h", "reward", order, ax, legend=False)
    if target is not None:
        ax.axhline(target, color="k", ls="--", lw=1, label=f"target = {target:g}")
        ax.legend(loc="lower right")
    ax.set_ylabel("reward (10-step mean)")
    ax.set_xlabel("wall-clock (h)")


def task_lengths_figure(lengths: dict[str, np.ndarray], out: str | Path) -> None:
    """Histogram of both formats' lengths on one axis, saved to ``out`` (png)."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    bins = np.arange(0, max(int(x.max()) for x in lengths.values()) + 2)
    for name, x in lengths.items():
        ax.hist(x, bins=bins, alpha=0.6, label=f"{name} scratchpad", density=True)
    ax.set_xlabel("response length of a correct solution (tokens, EOS included)")
    ax.set_ylabel("share of problems")
    ax.set_yscale("log")
    ax.legend()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    _save(fig, out, dpi=110)


def _lines(df: pl.DataFrame, x: str, y: str, order: list[str], ax, **kw) -> None:
    """``sns.lineplot`` of ``y`` against ``x``, one line per ``controller`` coloured in
    ``order``; ``kw`` goes to seaborn (``legend``, ``alpha``, ``drawstyle``...)."""
    sns.lineplot(df.to_pandas(), x=x, y=y, hue="controller", hue_order=order, ax=ax, **kw)


def _save(fig, path: str | Path, dpi: int) -> None:
    """Lay out ``fig``, write it to ``path`` at ``dpi`` and close it."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
