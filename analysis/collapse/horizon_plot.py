"""The ``compare horizon`` figure: held-out collapse steps predicted by the horizon law
(:mod:`sim.models.horizon`) against measured, and the law's curves over the grid."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from rolloutlab.sim.models.horizon import HorizonLaw, TwoPartLaw


def horizon_figure(
    held: pl.DataFrame,
    laws: dict[str, HorizonLaw | TwoPartLaw],
    grid: pl.DataFrame,
    path: Path,
    title: str,
) -> None:
    """Two panels: (left) held-out runs collapsed on both sides, predicted median collapse
    step (bootstrap 16-84 % bars) against measured, log-log, with the ±30 % band; (right)
    every measured collapse step against lr per S (first mechanism's law as lines, censored
    runs as triangles at T). ``held``: :func:`analysis.collapse.horizon.predict_rows` output;
    ``laws``: fitted law per mechanism (all runs); ``grid``: every run."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10.5, 4.2))
    both = held.filter(pl.col("collapsed") & pl.col("predicted_collapsed"))
    for i, (mech,) in enumerate(sorted(both.select("mechanism").unique().rows())):
        d = both.filter(pl.col("mechanism") == mech)
        y = d["predicted_t"].to_numpy()
        err = np.vstack([y - d["predicted_t_lo"].to_numpy(), d["predicted_t_hi"].to_numpy() - y])
        jitter = 1 + 0.04 * (i - 1)
        ax.errorbar(d["t_collapse"].to_numpy() * jitter, y, yerr=np.clip(err, 0, None),
                    fmt="o", ms=4, capsize=2, label=mech)  # fmt: skip
    hi = max(float(grid["T"].max()), 2.0)
    xs = np.array([1.0, hi])
    ax.plot(xs, xs, "k-", lw=0.8)
    ax.fill_between(xs, xs * 0.7, xs * 1.3, color="0.85", zorder=0, label="±30 %")
    ax.set(xscale="log", yscale="log", xlabel="measured collapse step (held out)",
           ylabel="predicted median collapse step", title="held-out runs")  # fmt: skip
    ax.legend(fontsize=7)
    mech0 = sorted(laws)[0]
    law, g = laws[mech0], grid.filter(pl.col("mechanism") == mech0)
    etas = np.geomspace(float(g["lr"].min()), float(g["lr"].max()), 60)
    for j, S in enumerate(sorted(g["S"].unique().to_list())):
        color = f"C{j}"
        d = g.filter(pl.col("S") == S)
        c = d.filter(pl.col("collapsed"))
        bx.plot(c["lr"].to_numpy(), c["t_collapse"].to_numpy(), "o", color=color, ms=4, alpha=0.7)
        s = d.filter(~pl.col("collapsed"))
        bx.plot(s["lr"].to_numpy(), s["T"].to_numpy() * 1.08, "^", color=color, ms=4, alpha=0.5)
        bx.plot(etas, np.minimum(law.median(S, etas), hi * 3), "-", color=color, label=f"S={S}")
    bx.axhline(hi, color="0.5", lw=0.8, ls="--")
    bx.set(xscale="log", yscale="log", xlabel="learning rate eta",
           ylabel="collapse step (triangles: none within T)", title=f"law, {mech0}")  # fmt: skip
    bx.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
