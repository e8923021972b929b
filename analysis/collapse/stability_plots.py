"""The collapse phase diagram of a stability grid (simulated, :mod:`sim.studies.stability`, or
real, :mod:`real.runners.stability`): S x lr heat map with the closed-form boundary over it."""

from __future__ import annotations

import numpy as np
import polars as pl
from rolloutlab.sim.models.staleness import StalenessParams, predict_eta_max


def plot_phase_diagram(
    df: pl.DataFrame,
    params: StalenessParams | None,
    T: int,
    path,
    title: str | None = None,
    eta_max: dict | None = None,
) -> None:
    """S x lr heat map of the collapsed fraction with the closed-form eta_max(S, T) over it.

    Rows are the S values (categorical), columns the lrs (log axis); written to ``path``.
    ``params=None`` (a real grid) draws no closed form; ``eta_max`` (``{S: lr}``, e.g.
    measured) is drawn dashed; ``title`` replaces the default title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    S_vals = sorted(df["S"].unique().to_list())
    lrs = np.array(sorted(df["lr"].unique().to_list()))
    frac = (
        df.group_by("S", "lr")
        .agg(pl.col("collapsed").mean().alias("f"))
        .sort("S", "lr")["f"]
        .to_numpy()
        .reshape(len(S_vals), len(lrs))
    )  # (n_S, n_lr)
    if lrs.size > 1:
        mids = np.sqrt(lrs[1:] * lrs[:-1])
        edges = np.concatenate([[lrs[0] ** 2 / mids[0]], mids, [lrs[-1] ** 2 / mids[-1]]])
    else:
        edges = np.array([lrs[0] / 1.5, lrs[0] * 1.5])
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(S_vals) + 2))
    mesh = ax.pcolormesh(edges, np.arange(len(S_vals) + 1), frac, cmap="RdYlGn_r", vmin=0, vmax=1)
    fig.colorbar(mesh, ax=ax, label="collapsed fraction over seeds")
    if params is not None:
        pred = predict_eta_max(params, np.array(S_vals), T)
        for i, eta in enumerate(np.atleast_1d(pred)):
            ax.plot(
                [eta, eta],
                [i, i + 1],
                color="black",
                lw=2,
                label="closed form eta_max" if i == 0 else None,
            )
    shown = [
        (i, eta_max[s])
        for i, s in enumerate(S_vals)
        if eta_max and np.isfinite(eta_max.get(s, np.nan))
    ]
    for k, (i, eta) in enumerate(shown):
        ax.plot(
            [eta, eta],
            [i, i + 1],
            color="black",
            lw=2,
            ls="--",
            label="measured eta_max" if k == 0 else None,
        )
    ax.set_xscale("log")
    ax.set_yticks(np.arange(len(S_vals)) + 0.5, [str(s) for s in S_vals])
    ax.set_xlabel("learning rate eta")
    ax.set_ylabel("sync interval S (learner steps)")
    ax.set_title(title or f"Collapse phase diagram, T = {T} steps (PAPERS.md §2 model)")
    if params is not None or shown:
        ax.legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
