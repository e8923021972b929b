"""Figures of the predicted-against-measured comparisons (seaborn, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import polars as pl
import seaborn as sns

_LABELS = {"predicted": "drawn (whole simulator)", "replay": "replay (measured lengths)"}


def _long(per_step: pl.DataFrame, metric: str) -> pl.DataFrame:
    """Held-out rows stacked per prediction: ``step, group_size, measured, predicted, prediction``."""
    held = per_step.filter(pl.col("split") == "held_out")
    return pl.concat(
        [
            held.select(
                "step",
                "group_size",
                pl.col(f"measured_{metric}").alias("measured"),
                pl.col(f"{p}_{metric}").alias("predicted"),
                pl.lit(label).alias("prediction"),
            )
            for p, label in _LABELS.items()
        ]
    )


def idle_scatter(per_step: pl.DataFrame, path: str | Path, title: str = "") -> None:
    """Predicted against measured makespan (s) and slot idle fraction of the held-out
    steps, one colour per prediction, marker per group size, with the line y = x."""
    sns.set_theme(style="whitegrid", context="paper")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    for ax, metric, label in (
        (axes[0], "makespan_s", "generation makespan (s)"),
        (axes[1], "idle_frac", "slot idle fraction"),
    ):
        df = (
            _long(per_step, metric)
            .with_columns(pl.col("group_size").cast(pl.Utf8).alias("G"))
            .to_pandas()
        )
        sns.scatterplot(
            df, x="measured", y="predicted", hue="prediction", style="G", ax=ax, alpha=0.7, s=22
        )
        lo, hi = (
            float(min(df.measured.min(), df.predicted.min())),
            float(max(df.measured.max(), df.predicted.max())),
        )
        ax.plot([lo, hi], [lo, hi], color="k", lw=1, ls="--", label="y = x")
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"predicted {label}")
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(title or "Held-out steps: predicted against measured")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def idle_timeseries(per_step: pl.DataFrame, path: str | Path, tau: float, title: str = "") -> None:
    """Per step: group size, makespan, slot idle fraction and straggler ratio, measured
    against both predictions; the fit steps are shaded."""
    sns.set_theme(style="whitegrid", context="paper")
    fig, axes = plt.subplots(
        4, 1, figsize=(9, 10), sharex=True, gridspec_kw={"height_ratios": [1, 2, 2, 2]}
    )
    df = per_step.sort("step")
    steps = df["step"].to_numpy()
    axes[0].step(steps, df["group_size"].to_numpy(), where="post", color="k")
    axes[0].set_ylabel("G")
    for ax, metric, label in (
        (axes[1], "makespan_s", "makespan (s)"),
        (axes[2], "idle_frac", "slot idle fraction"),
        (axes[3], "straggler_ratio", "straggler ratio max/median"),
    ):
        ax.plot(steps, df[f"measured_{metric}"].to_numpy(), color="k", lw=1.4, label="measured")
        for p, colour in (("predicted", "C0"), ("replay", "C1")):
            if f"{p}_{metric}" in df.columns and not (
                p == "replay" and metric == "straggler_ratio"
            ):
                ax.plot(
                    steps,
                    df[f"{p}_{metric}"].to_numpy(),
                    color=colour,
                    lw=1,
                    alpha=0.8,
                    label=_LABELS[p],
                )
        ax.set_ylabel(label)
    axes[3].axhline(tau, color="r", ls="--", lw=1, label=f"tau = {tau:g}")
    fit_end = df.filter(pl.col("split") == "fit")["step"].max()
    if fit_end is not None:
        for ax in axes:
            ax.axvspan(steps.min() - 0.5, fit_end + 0.5, color="0.85", zorder=0)
    axes[1].legend(fontsize=7, loc="upper right", title="grey: fit steps", title_fontsize=7)
    axes[3].legend(fontsize=7, loc="upper right")
    axes[3].set_xlabel("learner step")
    fig.suptitle(title or "Predicted and measured, step by step")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def collapse_figure(
    points: pl.DataFrame, scaling: pl.DataFrame, path: str | Path, title: str = ""
) -> None:
    """Left: held-out grid runs at (lr, S), marker = measured class, colour = whether the
    prediction matched. Right: ``S * eta_collapse`` and ``M_collapse * S * eta`` per S from
    each side of ``scaling`` (:func:`analysis.collapse.compare.scaling_table`); a flat line
    is the scaling law holding."""
    sns.set_theme(style="whitegrid", context="paper")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    pts = points.with_columns(
        (pl.col("predicted_collapsed") == pl.col("collapsed")).alias("ok")
    ).to_pandas()
    for collapsed, marker, name in ((True, "x", "collapsed"), (False, "o", "stable")):
        for ok, colour, verdict in (
            (True, "C2", "predicted right"),
            (False, "C3", "predicted wrong"),
        ):
            sub = pts[(pts.collapsed == collapsed) & (pts.ok == ok)]
            if len(sub):
                axes[0].scatter(
                    sub.lr,
                    sub.S.clip(lower=0.5),
                    marker=marker,
                    color=colour,
                    s=36,
                    alpha=0.7,
                    label=f"measured {name}, {verdict}",
                )
    axes[0].set_xscale("log")
    axes[0].set_yscale("log", base=2)
    axes[0].set_xlabel("learning rate eta")
    axes[0].set_ylabel("staleness S (0 shown at 0.5)")
    axes[0].legend(fontsize=7)
    axes[0].set_title("held-out grid runs")
    rows = []
    for col in scaling.columns:
        if col == "S" or not (col.endswith("S_eta_collapse") or col.endswith("M_S_eta")):
            continue
        side, _, qty = col.partition("_")
        label = "S * eta_collapse" if qty == "S_eta_collapse" else "M_collapse * S * eta"
        rows.append(
            scaling.select(
                "S",
                pl.col(col).alias("value"),
                pl.lit(side).alias("side"),
                pl.lit(label).alias("quantity"),
            )
        )
    long = (
        pl.concat(rows)
        .drop_nulls("value")
        .with_columns(pl.col("S").clip(lower_bound=1))
        .to_pandas()
    )
    if len(long):
        sns.lineplot(long, x="S", y="value", hue="quantity", style="side", markers=True, ax=axes[1])
        axes[1].set_xscale("log", base=2)
        axes[1].set_yscale("log")
        axes[1].legend(fontsize=7)
    axes[1].set_ylabel("value (flat in S: the law holds)")
    axes[1].set_title("scaling checks per S")
    fig.suptitle(title or "Collapse: predicted against measured")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
