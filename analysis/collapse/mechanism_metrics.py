"""Per-run mechanism signals of a real stability grid: what each run's learner
logged, under verl's names, up to its collapse step (``compare horizon`` writes them as
``mechanism_metrics.csv`` when the grids keep their run folders).

Per run (``<grid>/runs/S{S}_lr{lr}_seed{seed}/learner.jsonl``, steps before
``t_collapse``, or all for a stable run): ``ppo_kl_max`` (largest ``actor/ppo_kl``, k1 KL to
the behaviour policy), ``kl_ref_max`` (largest ``actor/kl_ref``), ``entropy_first`` /
``entropy_last`` (mean ``actor/entropy`` of the first / last 3 logged steps),
``grad_norm_max``, ``clipfrac_mean`` (``actor/pg_clipfrac``) and ``probs_diff_mean``
(``training/rollout_probs_diff_mean``, the engine-learner gap, staleness included).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from rolloutlab.sim.trace.jsonl import read_rows

SIGNALS = {
    "ppo_kl_max": ("actor/ppo_kl", "max"),
    "kl_ref_max": ("actor/kl_ref", "max"),
    "grad_norm_max": ("actor/grad_norm", "max"),
    "clipfrac_mean": ("actor/pg_clipfrac", "mean"),
    "probs_diff_mean": ("training/rollout_probs_diff_mean", "mean"),
}


def _run_row(rows: list[dict], t_collapse: int | None) -> dict:
    upto = [r for r in rows if t_collapse is None or int(r["step"]) < t_collapse]
    out: dict = {}
    for name, (key, how) in SIGNALS.items():
        v = np.array([r[key] for r in upto if r.get(key) is not None], float)
        out[name] = float(getattr(np, how)(v)) if v.size else None
    ent = [r["actor/entropy"] for r in upto if r.get("actor/entropy") is not None]
    out["entropy_first"] = float(np.mean(ent[:3])) if ent else None
    out["entropy_last"] = float(np.mean(ent[-3:])) if ent else None
    return out


def mechanism_metrics(runs: pl.DataFrame, grids: dict[str, list[Path]]) -> pl.DataFrame | None:
    """One row per run of ``runs`` (``mechanism, S, lr, seed, collapsed, t_collapse``)
    whose run folder under one of ``grids[mechanism]``'s ``runs/`` (the first that has it)
    has a ``learner.jsonl`` with the signals (module docstring); None when no run has one
    (a bundled grid without run folders, or one logged before the signals existed)."""
    rows = []
    for r in runs.iter_rows(named=True):
        name = f"S{r['S']}_lr{r['lr']:g}_seed{r['seed']}"
        logs = [g / "runs" / name / "learner.jsonl" for g in grids[r["mechanism"]]]
        log = next((x for x in logs if x.exists()), None)
        if log is None:
            continue
        logged = read_rows(log)
        if not any("actor/ppo_kl" in x for x in logged):
            continue
        t = r["t_collapse"] if r["collapsed"] else None
        rows.append({k: r[k] for k in ("mechanism", "S", "lr", "seed", "collapsed", "t_collapse")}
                    | _run_row(logged, t))  # fmt: skip
    return pl.DataFrame(rows) if rows else None
