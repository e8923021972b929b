"""The figure of ``rolloutlab advise``: every trial's time against straggler rate,
coloured by collapse margin, the Pareto trials ringed and the chosen one starred."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import seaborn as sns


def advise_figure(
    trials: pl.DataFrame, path: str | Path, time_label: str, max_straggler_rate: float
) -> None:
    """Scatter of :func:`analysis.advise.search.search`'s ok trials: ``time_s`` (log y, labelled
    ``time_label``) against ``straggler_rate``, hue log10(collapse margin), infeasible
    trials as crosses, the straggler bound dashed. Writes ``path``."""
    ok = trials.filter(pl.col("status") == "ok").with_columns(
        pl.col("collapse_margin").log10().alias("log10 collapse margin")
    )
    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for feasible, marker in ((True, "o"), (False, "X")):
        part = ok.filter(pl.col("feasible") == feasible)
        if part.height:
            ax.scatter(
                part["straggler_rate"].to_numpy(),
                part["time_s"].to_numpy(),
                c=part["log10 collapse margin"].to_numpy(),
                cmap="coolwarm_r",
                vmin=-1,
                vmax=1,
                marker=marker,
                s=36,
                alpha=0.8,
                label="feasible" if feasible else "infeasible",
            )
    pareto = ok.filter("pareto")
    ax.scatter(
        pareto["straggler_rate"].to_numpy(),
        pareto["time_s"].to_numpy(),
        s=140,
        facecolors="none",
        edgecolors="black",
        label="Pareto",
    )
    best = ok.filter("best")
    if best.height:
        ax.scatter(
            best["straggler_rate"][0],
            best["time_s"][0],
            marker="*",
            s=300,
            c="gold",
            edgecolors="black",
            zorder=5,
            label="chosen",
        )
    ax.axvline(max_straggler_rate, ls="--", c="grey", lw=1)
    if ok.height:
        fig.colorbar(
            plt.cm.ScalarMappable(plt.Normalize(-1, 1), "coolwarm_r"),
            ax=ax,
            label="log10 collapse margin (> 0: no collapse predicted)",
        )
        if np.nanmin(ok["time_s"].to_numpy()) > 0:
            ax.set_yscale("log")
    ax.set_xlabel("straggler rate")
    ax.set_ylabel(time_label)
    ax.legend(loc="best", fontsize=8)
    ax.set_title("advise: trials (ringed: Pareto in time, straggler rate, collapse margin)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
