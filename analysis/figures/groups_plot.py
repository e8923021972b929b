"""Figure of ``compare groups``: measured and predicted P(straggler) against G."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import polars as pl
import seaborn as sns


def straggler_vs_g_figure(table: pl.DataFrame, path: str | Path, title: str = "") -> None:
    """P(max/median > tau) against G, one colour per tau: measured (solid, +-1 standard
    error bars), each model's prediction (dashed: the step-indexed ``empirical_s<W>`` when
    present, else ``hierarchical``, else ``empirical``; dotted: the others). ``table`` has the columns
    of :func:`calibration.validation.groups.validate_groups`. Writes ``path`` (png)."""
    sns.set_theme(style="whitegrid", context="paper")
    models = table["model"].unique(maintain_order=True).to_list()
    stepped = [m for m in models if m.startswith("empirical_s")]
    main = (stepped or [m for m in ("hierarchical", "empirical") if m in models] or models)[0]
    taus = sorted(table["tau"].unique().to_list())
    colours = sns.color_palette("deep", len(taus))
    styles = {m: ":" for m in models} | {main: "--"}
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for colour, tau in zip(colours, taus, strict=True):
        t = table.filter(pl.col("tau") == tau)
        m = t.filter(pl.col("model") == main).sort("G")
        ax.errorbar(
            m["G"],
            m["p_straggler_meas"],
            yerr=m["p_straggler_meas_se"],
            color=colour,
            marker="o",
            capsize=2,
            label=f"measured, tau={tau:g}",
        )
        for name in models:
            p = t.filter(pl.col("model") == name).sort("G")
            ax.plot(
                p["G"],
                p["p_straggler_pred"],
                styles[name],
                color=colour,
                alpha=1.0 if name == main else 0.6,
                label=f"{name}, tau={tau:g}" if name == main or tau == taus[0] else None,
            )
    ax.set_xlabel("group size G")
    ax.set_ylabel("P(max/median > tau)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title or f"held-out steps, B={table['B'][0]}")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
