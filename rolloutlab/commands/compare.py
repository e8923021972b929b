"""``rolloutlab compare`` (predicted against measured) and ``rolloutlab report`` (HTML)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click
import polars as pl

from rolloutlab.commands.common import OutDirError, claim_out_dir, fail
from rolloutlab.sim.provenance import write_config


def _echo_table(df: pl.DataFrame) -> None:
    with pl.Config(
        tbl_rows=-1,
        tbl_cols=-1,
        tbl_width_chars=200,
        float_precision=3,
        tbl_hide_dataframe_shape=True,
        tbl_hide_column_data_types=True,
    ):
        click.echo(df)


@click.group()
def compare() -> None:
    """Put the simulator's predictions next to a real run's measurements."""


@compare.command()
@click.option(
    "--real",
    "real_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Run directory with rollouts/steps traces and config.json (rolloutlab real sync).",
)
@click.option(
    "--fit-steps",
    type=click.IntRange(min=2),
    default=None,
    help="K: calibrate on steps 0..K-1, predict the rest [default: half the steps].",
)
@click.option(
    "--draws",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Length draws per step for the 'drawn' prediction.",
)
@click.option(
    "--length-model",
    type=click.Choice(["empirical", "lognormal"]),
    default="empirical",
    show_default=True,
    help="Length model of the 'drawn' prediction: observed groups "
    "resampled by prompt length, or a per-prompt lognormal.",
)
@click.option(
    "--capacity",
    type=click.IntRange(min=1),
    default=None,
    help="Engine slots per worker [default: the run's config].",
)
@click.option("--tau", type=float, default=None, help="Straggler threshold [default: the run's].")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path))
def idle(
    real_dir: Path, fit_steps, draws, length_model, capacity, tau, seed, out_dir: Path
) -> None:
    """Generation makespan, slot idle fraction and stragglers: simulated against measured.

    Writes OUT/idle_comparison.csv (per step; predicted_* = the 'drawn' prediction),
    idle_summary.csv/.json, idle_scatter.png, idle_timeseries.png, replay_rollouts.parquet
    and config.json.
    """
    from rolloutlab.analysis.compare_plots import idle_scatter, idle_timeseries
    from rolloutlab.analysis.idle_compare import IdleCompareConfig, compare_idle
    from rolloutlab.analysis.run_input import RunInputError, load_run
    from rolloutlab.sim import trace
    from rolloutlab.sim.trace import TraceError

    cfg = IdleCompareConfig(
        fit_steps=fit_steps, draws=draws, seed=seed, tau=tau, length_model=length_model
    )
    try:
        claim_out_dir(out_dir, "compare-idle")
        run = load_run(real_dir, capacity=capacity)
        res = compare_idle(run, cfg)
    except (RunInputError, TraceError, ValueError) as exc:
        fail(exc)
    res.per_step.write_csv(out_dir / "idle_comparison.csv")
    res.summary.write_csv(out_dir / "idle_summary.csv")
    run_cfg = run.config.get("config", run.config)
    name = f"{real_dir.name} ({run_cfg.get('controller', '?')})"
    meta = {
        "run": str(real_dir),
        "run_id": run.config.get("run_id"),
        "controller": run_cfg.get("controller"),
        "fit_steps": res.fit_steps,
        "steps": run.steps.height,
        "tau": res.tau,
        "engine": asdict(run.engine),
        "cost_fit": res.cost_fit.to_dict(),
        "length_fit": res.lengths.to_dict(),
    }
    (out_dir / "idle_summary.json").write_text(
        json.dumps({**meta, "summary": res.summary.to_dicts()}, indent=2) + "\n"
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
    click.echo(
        f"{name}: fit on steps 0..{res.fit_steps - 1}, {res.summary['held_out_steps'][0]} held-out steps"
    )
    _echo_table(res.summary)
    click.echo(f"-> {out_dir}")


@compare.command()
@click.option(
    "--real",
    "real_dir",
    required=True,
    type=click.Path(exists=True, path_type=Path),
    help="Measured stability grid: a directory with stability.csv (+ config.json), or the CSV.",
)
@click.option(
    "--sim",
    "sim_dir",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Simulated grid (rolloutlab stability --out DIR), for its scaling checks.",
)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=None,
    help="Learner steps T per real run [default: the real grid's config.json].",
)
@click.option(
    "--split",
    type=click.Choice(["lr", "seed"]),
    default="lr",
    show_default=True,
    help="Hold out alternate learning rates, or odd seeds.",
)
@click.option(
    "--max-evals",
    type=click.IntRange(min=10),
    default=300,
    show_default=True,
    help="Model-grid evaluations of the fit.",
)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path))
def collapse(real_dir: Path, sim_dir: Path | None, steps, split, max_evals, out_dir: Path) -> None:
    """Fit the collapse model on part of a measured stability grid and predict the rest.

    Writes OUT/collapse_points.csv (held-out runs, measured and predicted),
    collapse_scaling.csv (per S: S*eta_collapse and M_collapse*S*eta from the real grid,
    the fitted model and the simulated grid), collapse_summary.json, collapse.png, config.json.
    """
    from rolloutlab.analysis.collapse_compare import (
        GridError,
        agreement,
        fit_collapse,
        grid_steps,
        predict,
        read_grid,
        scaling_table,
        split_grid,
    )
    from rolloutlab.analysis.compare_plots import collapse_figure

    try:
        T = grid_steps(real_dir, steps)
        claim_out_dir(out_dir, "compare-collapse")
        real = read_grid(real_dir)
        sim = read_grid(sim_dir) if sim_dir is not None else None
        fit_rows, held = split_grid(real, split)
        fit = fit_collapse(fit_rows, T, max_evals=max_evals)
    except (GridError, OutDirError) as exc:
        fail(exc)
    held_pred = predict(fit.params, held, T)
    summary = {
        "real": str(real_dir),
        "sim": str(sim_dir) if sim_dir else None,
        "steps": T,
        "split": split,
        "fit_points": fit_rows.height,
        "held_out": agreement(held_pred),
        "fit": {
            "loss": fit.loss,
            "fit_agreement": fit.fit_agreement,
            "evaluations": fit.evaluations,
            "params": asdict(fit.params),
        },
    }
    table = scaling_table(real, predict(fit.params, real, T), sim)
    held_pred.write_csv(out_dir / "collapse_points.csv")
    table.write_csv(out_dir / "collapse_scaling.csv")
    (out_dir / "collapse_summary.json").write_text(
        json.dumps(summary, indent=2, default=str) + "\n"
    )
    collapse_figure(
        held_pred,
        table,
        out_dir / "collapse.png",
        f"{real_dir.name}: fit on half the {split} values",
    )
    write_config(out_dir / "config.json", {"kind": "compare-collapse", **summary})
    h = summary["held_out"]
    click.echo(
        f"held-out runs: {h['points']}, classification agreement {h['agreement']:.3f}, "
        f"t_collapse MdAPE {h['t_collapse_mdape']:.3f} over {h['both_collapsed']} runs collapsed on both sides"
    )
    click.echo(
        "fitted: "
        + ", ".join(
            f"{k}={getattr(fit.params, k):.4g}"
            for k in ("lag_sensitivity", "sigma_prompt", "R_batch", "R_crit")
        )
    )
    _echo_table(table)
    click.echo(f"-> {out_dir}")


@click.command()
@click.argument(
    "studies",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path))
def report(studies: tuple[Path, ...], out_dir: Path) -> None:
    """One self-contained HTML page per study directory (figures embedded)."""
    from rolloutlab.analysis.report import ReportError, write_reports

    try:
        for path in write_reports(list(studies), out_dir):
            click.echo(f"wrote {path}")
    except ReportError as exc:
        fail(exc)
