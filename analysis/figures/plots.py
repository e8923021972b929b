"""Figures (seaborn/matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
import polars as pl
import seaborn as sns
from rolloutlab.sim.scenario.provenance import write_config
from rolloutlab.sim.studies.sweep import sweep_means
from rolloutlab.sim.trace.metrics import scan_step_metrics


def comparison_figure(
    rollouts: pl.DataFrame | pl.LazyFrame,
    steps: pl.DataFrame,
    path: str | Path,
    tau: float,
    target: float | None = None,
) -> None:
    """A controller comparison summarised, one colour per controller (``run_id``):

    - the share of steps at each group size G (one stacked bar per controller);
    - the straggler ratio's distribution (box: quartiles, whiskers: 5th and 95th
      percentiles) against the threshold ``tau``, with the straggler rate;
    - the time per learner step (between consecutive step ends) as a rolling mean over
      :func:`_window` steps with its rolling interquartile band;
    - when the steps carry rewards: reward (trailing mean over 10 steps, as
      ``time_to_target`` reads it) against wall clock (h), cut where every run has
      reached ``target`` (the rest summarised in the panel's title).

    ``rollouts`` may be a lazy scan (read back one run and a few steps at a time).
    Writes ``path``."""
    order = steps["run_id"].unique(maintain_order=True).to_list()  # same colour per controller
    colours = dict(zip(order, sns.color_palette("deep", len(order))))
    lf = rollouts.lazy()  # a scan is read a few steps at a time
    m = pl.concat(
        scan_step_metrics(lf.filter(pl.col("run_id") == run_id), tau)
        .select("step", "group_size", "straggler_ratio")
        .with_columns(pl.lit(run_id).alias("controller"))
        for run_id in order
    )
    wall = steps.sort("run_id", "step").with_columns(
        ((pl.col("t_end") - pl.col("t_start").min().over("run_id")) / 3600).alias("wall_clock_h"),
        (pl.col("t_end") - pl.col("t_end").shift(1).over("run_id"))
        .fill_null(pl.col("t_end") - pl.col("t_start"))
        .alias("step_time_s"),
        pl.col("run_id").alias("controller"),
    )
    sns.set_theme(style="whitegrid", context="paper")
    rewards = "reward_mean" in steps.columns and steps["reward_mean"].is_not_null().any()
    fig, axes = plt.subplots(2, 2, figsize=(12, 7.2))
    _g_shares(m, order, axes[0, 0])
    _straggler_quantiles(m, order, colours, tau, axes[0, 1])
    _rolling_band(wall, "step_time_s", order, colours, axes[1, 0])
    axes[1, 0].set_ylabel("time per learner step (s)")
    if rewards:
        _reward_panel(wall, order, colours, axes[1, 1], target)
    else:
        axes[1, 1].axis("off")
    _save(fig, path, dpi=160)


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


def _g_shares(m: pl.DataFrame, order: list[str], ax) -> None:
    """One horizontal bar per controller split by the share of its steps at each G
    (colour: G on a log scale), the G written in segments wide enough to hold it."""
    shares = (
        m.group_by("controller", "group_size")
        .len()
        .with_columns((pl.col("len") / pl.col("len").sum().over("controller")).alias("share"))
    )
    values = sorted(shares["group_size"].unique().to_list())
    cmap = plt.get_cmap("viridis")
    span = np.log2(max(values) / min(values)) or 1.0
    for i, name in enumerate(order):
        left = 0.0
        rows = shares.filter(pl.col("controller") == name).sort("group_size")
        for g, share in zip(rows["group_size"], rows["share"]):
            colour = cmap(0.15 + 0.75 * np.log2(g / min(values)) / span)
            ax.barh(i, share, left=left, color=colour, edgecolor="white", height=0.7)
            if share >= 0.06:
                ax.text(left + share / 2, i, f"G={g}", ha="center", va="center", fontsize=8,
                        color="white")  # fmt: skip
            left += share
    ax.set_yticks(range(len(order)), order)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.set_xlabel("share of steps at each group size G")
    ax.grid(axis="y", visible=False)


def _straggler_quantiles(m: pl.DataFrame, order: list[str], colours: dict, tau: float, ax) -> None:
    """Box per controller: straggler ratio quartiles, whiskers at the 5th and 95th
    percentiles, the threshold ``tau`` dashed and each straggler rate written."""
    data = [m.filter(pl.col("controller") == c)["straggler_ratio"].drop_nulls().to_numpy()
            for c in order]  # fmt: skip
    box = ax.boxplot(data, orientation="horizontal", whis=(5, 95), showfliers=False, patch_artist=True,
                     widths=0.6, medianprops={"color": "black"})  # fmt: skip
    for patch, c in zip(box["boxes"], order):
        patch.set_facecolor(colours[c])
        patch.set_alpha(0.75)
    ax.axvline(tau, color="k", ls="--", lw=1, label=f"tau = {tau:g}")
    ax.set_yticks(range(1, len(order) + 1), [
        f"{c}\n{100 * float(np.mean(d > tau)):.0f} % of steps > tau" for c, d in zip(order, data)
    ])  # fmt: skip
    ax.invert_yaxis()
    ax.set_xlabel("straggler ratio max/median per step")
    ax.legend(loc="lower right")


def _window(n_steps: int) -> int:
    """Rolling window (steps) for per-step series: about a twelfth of the run, 3 to 50."""
    return int(min(50, max(3, n_steps // 12)))


def _rolling_band(df: pl.DataFrame, y: str, order: list[str], colours: dict, ax) -> None:
    """Per controller: ``y`` against step as a centred rolling mean over
    :func:`_window` steps, with the rolling 25th-75th percentile band."""
    w = _window(int(df.group_by("controller").len()["len"].max()))
    for c in order:
        d = df.filter(pl.col("controller") == c).sort("step")
        r = d.with_columns(
            pl.col(y).rolling_mean(w, center=True, min_samples=1).alias("mean"),
            pl.col(y).rolling_quantile(0.25, window_size=w, center=True, min_samples=1).alias("lo"),
            pl.col(y).rolling_quantile(0.75, window_size=w, center=True, min_samples=1).alias("hi"),
        )
        x = r["step"].to_numpy()
        ax.fill_between(x, r["lo"].to_numpy(), r["hi"].to_numpy(), color=colours[c], alpha=0.2,
                        lw=0)  # fmt: skip
        ax.plot(x, r["mean"].to_numpy(), color=colours[c], label=c)
    ax.set_xlabel(f"learner step (rolling mean over {w} steps, band 25-75 %)")
    ax.legend(loc="upper right", fontsize=8)


def _reward_panel(
    wall: pl.DataFrame, order: list[str], colours: dict, ax, target: float | None
) -> None:
    """Reward (trailing mean of ``reward_mean`` over 10 full steps, as ``time_to_target``
    reads it) against cumulative wall clock (h), one line per controller; the time axis
    cut at 1.3 x the last controller's time to ``target`` when every controller reached
    it, the cut stated in the title."""
    df = wall.with_columns(
        pl.col("reward_mean").rolling_mean(10, min_samples=10).over("controller").alias("reward")
    )
    reached = {}
    for c in order:
        d = df.filter(pl.col("controller") == c)
        ax.plot(d["wall_clock_h"].to_numpy(), d["reward"].to_numpy(), color=colours[c], label=c)
        if target is not None:
            hit = d.filter(pl.col("reward") >= target)
            reached[c] = float(hit["wall_clock_h"][0]) if hit.height else None
    ax.set_ylabel("reward (10-step mean)")
    ax.set_xlabel("wall clock (h)")
    if target is None:
        return
    ax.axhline(target, color="k", ls="--", lw=1, label=f"target = {target:g}")
    end = float(df["wall_clock_h"].max())
    times = [v for v in reached.values() if v is not None]
    if reached and len(times) == len(reached):  # every controller reached the target
        last = max(times)
        cut = 1.3 * last
        if cut < 0.8 * end:  # why: a cut that hides little is no summary
            ax.set_xlim(0, cut)
            after = df.filter(pl.col("wall_clock_h") > cut)["reward"].drop_nulls()
            ax.set_title(
                f"every controller above {target:g} by {last:.2g} h; cut at {cut:.2g} h of "
                f"{end:.3g} h"
                + (f"\nafter the cut: 10-step mean reward {after.min():.3f} to {after.max():.3f}"
                   if after.len() else ""),
                fontsize=9,
            )  # fmt: skip
    else:
        missed = [c for c, v in reached.items() if v is None]
        ax.set_title(f"never reached {target:g}: {', '.join(missed)}", fontsize=9)
    ax.legend(loc="lower right", fontsize=8)


def task_lengths_figure(lengths: dict[str, np.ndarray], out: str | Path) -> None:
    """Histogram of both formats' lengths on one axis, saved to ``out`` (png)."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    bins = list(range(max(int(x.max()) for x in lengths.values()) + 2))
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


def write_sweep_outputs(
    runs: pl.DataFrame, config: dict, out_dir: Path, title: str
) -> pl.DataFrame:
    """The output folder of ``rolloutlab sweep``: ``runs.csv`` (every grid point, seed and
    controller; failed points with their status), ``means.csv``
    (:func:`sim.studies.sweep.sweep_means` of the finished runs), ``sweep.png``
    (:func:`sweep_figure`, ``title``) and ``config.json`` (``config`` with provenance).
    Returns the means."""
    ok = runs.filter(pl.col("status") == "ok")
    means = sweep_means(ok)
    runs.write_csv(out_dir / "runs.csv")
    means.write_csv(out_dir / "means.csv")
    sweep_figure(ok, out_dir / "sweep.png", title)
    write_config(out_dir / "config.json", config)
    return means
