"""The output folders of ``rolloutlab compare idle`` and ``rolloutlab compare collapse``:
tables, JSON summaries, figures and ``config.json`` (provenance), from the comparisons
of :mod:`analysis.idle.compare` and :mod:`analysis.collapse.compare`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import polars as pl
from rolloutlab.analysis.collapse import baselines
from rolloutlab.analysis.collapse.compare import (
    CollapseFit,
    agreement,
    fit_collapse,
    held_out_value,
    predict,
    read_grid,
    scaling_table,
    split_grid,
)
from rolloutlab.analysis.figures.compare_plots import collapse_figure, idle_scatter, idle_timeseries
from rolloutlab.analysis.idle.compare import IdleCompareConfig, IdleComparison
from rolloutlab.analysis.inputs.run_input import RunData
from rolloutlab.sim.scenario.provenance import write_config
from rolloutlab.sim.trace import schema as trace
from rolloutlab.sim.trace import strict_json


def write_idle_outputs(
    run: RunData, res: IdleComparison, cfg: IdleCompareConfig, out_dir: Path
) -> str:
    """Write ``out_dir``/idle_comparison.csv, idle_summary.csv/.json, replay_rollouts.parquet,
    idle_scatter.png, idle_timeseries.png and config.json (``kind: compare-idle``).

    Returns the run's display name, ``"<folder> (<controller>)"``.
    """
    res.per_step.write_csv(out_dir / "idle_comparison.csv")
    res.summary.write_csv(out_dir / "idle_summary.csv")
    run_cfg = run.config.get("config", run.config)
    name = f"{run.path.name} ({run_cfg.get('controller', '?')})"
    meta = {
        "run": str(run.path),
        "run_id": run.config.get("run_id"),
        "controller": run_cfg.get("controller"),
        "fit_steps": res.fit_steps,
        "steps": run.steps.height,
        "tau": res.tau,
        "engine": asdict(run.engine),
        "cost_fit": res.cost_fit.to_dict(),
        "length_fit": res.lengths.to_dict()
        if hasattr(res.lengths, "to_dict")
        else {"multi_turn": asdict(res.lengths)},  # a multi-turn run's block
    }
    strict_json.write_json(
        out_dir / "idle_summary.json", {**meta, "summary": res.summary.to_dicts()}
    )
    trace.write_parquet(res.replay_rollouts, out_dir / "replay_rollouts.parquet", "rollouts")
    idle_scatter(
        res.per_step, out_dir / "idle_scatter.png", f"{name}: held-out steps {res.fit_steps}+"
    )
    idle_timeseries(res.per_step, out_dir / "idle_timeseries.png", res.tau, f"{name}: per step")
    write_config(
        out_dir / "config.json",
        {"kind": "compare-idle", "settings": asdict(cfg), **meta, "real_config": run.config},
    )
    return name


@dataclass(frozen=True)
class CollapseStudy:
    """A collapse model fitted on part of a measured grid, and its predictions."""

    fit: CollapseFit
    held_out: pl.DataFrame
    """Held-out runs, measured and predicted (:func:`analysis.collapse.compare.predict`)."""
    scaling: pl.DataFrame
    """Per S: the scaling checks of the real grid, the fitted model and the simulated grid."""
    summary: dict
    """What ``collapse_summary.json`` holds: inputs, split, held-out agreement, the fit."""


def collapse_study(
    real_dir: Path,
    sim_dir: Path | None,
    T: int,
    split: str,
    max_evals: int,
    held_out: float | None = None,
) -> CollapseStudy:
    """Read the measured grid (and the simulated one, if given), fit the collapse model on
    one half of ``split`` (:func:`analysis.collapse.compare.split_grid`, ``held_out`` the
    lr or S value held out) and predict the other half and the whole grid; beside it the
    naive rules and the run-to-run floor on the same held-out runs
    (:mod:`analysis.collapse.baselines`; the model's probability is its 0/1 class: one
    simulated run per held-out run). Raises :class:`analysis.collapse.compare.GridError`."""
    real = read_grid(real_dir)
    sim = read_grid(sim_dir) if sim_dir is not None else None
    if split == "S" and held_out is None:
        held_out = held_out_value(real, "S")
    fit_rows, held = split_grid(real, split, held_out)
    fit = fit_collapse(fit_rows, T, max_evals=max_evals)
    held_pred = predict(fit.params, held, T)
    axis = None if split == "seed" else split
    cls = held_pred["predicted_collapsed"].to_numpy().astype(bool)
    t_model = held_pred["predicted_t_collapse"].cast(pl.Float64).fill_null(T + 1.0).to_numpy()
    for rule, f in baselines.predict(fit_rows, held, T, axis).items():
        held_pred = held_pred.with_columns(
            f["p"].alias(f"p_{rule}"), f["predicted_t"].alias(f"t_{rule}")
        )
    held_pred = held_pred.with_columns(pl.lit("seen" if axis is None else "unseen").alias("cell"))
    summary = {
        "real": str(real_dir),
        "sim": str(sim_dir) if sim_dir else None,
        "steps": T,
        "split": split,
        **({"held_out_value": held_out} if held_out is not None else {}),
        "fit_points": fit_rows.height,
        "held_out": agreement(held_pred),
        "scores": baselines.score(held_pred, cls.astype(float), cls, t_model, T),
        "baselines": baselines.baseline_scores(fit_rows, held, T, axis),
        "fit": {
            "loss": fit.loss,
            "fit_agreement": fit.fit_agreement,
            "evaluations": fit.evaluations,
            "params": asdict(fit.params),
        },
    }
    table = scaling_table(real, predict(fit.params, real, T), sim)
    return CollapseStudy(fit, held_pred, table, summary)


def write_collapse_outputs(study: CollapseStudy, out_dir: Path, title: str) -> None:
    """Write ``out_dir``/collapse_points.csv, collapse_scaling.csv, collapse_summary.json,
    collapse.png (titled ``title``) and config.json (``kind: compare-collapse``)."""
    study.held_out.write_csv(out_dir / "collapse_points.csv")
    study.scaling.write_csv(out_dir / "collapse_scaling.csv")
    strict_json.write_json(out_dir / "collapse_summary.json", study.summary, default=str)
    collapse_figure(study.held_out, study.scaling, out_dir / "collapse.png", title)
    write_config(out_dir / "config.json", {"kind": "compare-collapse", **study.summary})
