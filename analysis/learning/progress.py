"""Learning progress of real runs against wall clock: one row per run and a figure
(``rolloutlab real progress``; numbers in docs/real_task.md)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import seaborn as sns
from rolloutlab.analysis.inputs.run_input import RunInputError, real_run_config
from rolloutlab.sim.trace.jsonl import read_rows

SMOOTH = 10
"""Steps in the trailing mean of ``reward_mean`` drawn in the figure."""


class ProgressError(ValueError):
    """A run directory that cannot be compared; the message names it."""


def _jsonl(path: Path, fields: tuple[str, ...] = ()) -> list[dict]:
    """The rows of a run's JSONL log, each holding ``fields``. Raises ProgressError naming
    the file and line of a row that is not JSON or lacks a field, or a missing file."""
    if not path.exists():
        raise ProgressError(f"{path.parent}: no {path.name} (not a finished real run)")
    try:
        rows = read_rows(path)
    except ValueError as exc:
        raise ProgressError(str(exc)) from None
    lines = [no for no, x in enumerate(path.read_text().splitlines(), 1) if x.strip()]
    for no, row in zip(lines, rows, strict=True):
        missing = [f for f in fields if not isinstance(row, dict) or f not in row]
        if missing:
            raise ProgressError(f"{path}: line {no}: field {missing[0]!r} missing")
    return rows


def load_runs(run_dirs: list[Path]) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """``(runs, evals, steps)`` of real run directories (``config.json``, ``eval.jsonl``,
    ``learner.jsonl``): ``runs`` one row per run (``run, task, controller, seed``),
    ``evals`` (``run, step, t_s, accuracy``), ``steps`` (``run, step, t_s, G, reward_mean``).

    Raises: ProgressError naming a directory without those files, a ``config.json``
    that is not a real run's (a simulator output), or runs of different tasks (their accuracies are not comparable).
    """
    runs, evals, steps = [], [], []
    for d in map(Path, run_dirs):
        if not (d / "config.json").exists():
            raise ProgressError(f"{d}: no config.json (not a real run directory)")
        try:
            cfg = real_run_config(d)["config"]
        except RunInputError as exc:
            raise ProgressError(str(exc)) from None
        except KeyError:
            raise ProgressError(f"{d}/config.json: no 'config' (not a real run's)") from None
        if not isinstance(cfg, dict):
            raise ProgressError(f"{d}/config.json: field 'config': expected a JSON object")
        cfg = cfg.get("sync", cfg)  # an asynchronous run nests the sync settings
        name = d.name
        runs.append(
            {
                "run": name,
                "task": cfg.get("task_name", "digit-chain"),
                "controller": cfg["controller"],
                "seed": cfg["seed"],
            }
        )
        evals += [
            {"run": name, "step": r["step"], "t_s": r["t_s"], "accuracy": r["accuracy"]}
            for r in _jsonl(d / "eval.jsonl", ("step", "t_s", "accuracy"))
        ]
        steps += [
            {
                "run": name,
                "step": r["step"],
                "t_s": r.get("t_s"),
                "G": r["G"],
                "reward_mean": r["reward_mean"],
            }
            for r in _jsonl(d / "learner.jsonl", ("step", "G", "reward_mean"))
        ]
    runs_df = pl.DataFrame(runs)
    tasks = runs_df["task"].unique().to_list()
    if len(tasks) > 1:
        raise ProgressError(f"runs of different tasks {sorted(tasks)}: compare one task at a time")
    return runs_df, pl.DataFrame(evals), pl.DataFrame(steps)


def run_table(
    runs: pl.DataFrame, evals: pl.DataFrame, steps: pl.DataFrame, target: float | None
) -> pl.DataFrame:
    """One row per run: ``run, controller, seed, mean_G, accuracy_start, accuracy_end,
    reward_last20`` (mean ``reward_mean`` of the last 20 steps), and with ``target``
    ``time_to_target_s`` / ``steps_to_target`` (first evaluation with accuracy >= target;
    null if never)."""
    rows = []
    for r in runs.iter_rows(named=True):
        ev = evals.filter(pl.col("run") == r["run"]).sort("step")
        st = steps.filter(pl.col("run") == r["run"]).sort("step")
        row = {
            **{k: r[k] for k in ("run", "controller", "seed")},
            "mean_G": float(st["G"].mean()),
            "accuracy_start": float(ev["accuracy"][0]),
            "accuracy_end": float(ev["accuracy"][-1]),
            "reward_last20": float(st["reward_mean"].tail(20).mean()),
        }
        if target is not None:
            hit = ev.filter(pl.col("accuracy") >= target).head(1)
            row["time_to_target_s"] = float(hit["t_s"][0]) if hit.height else None
            row["steps_to_target"] = int(hit["step"][0]) + 1 if hit.height else None
        rows.append(row)
    return pl.DataFrame(rows)


def progress_figure(
    runs: pl.DataFrame,
    evals: pl.DataFrame,
    steps: pl.DataFrame,
    path: str | Path,
    target: float | None = None,
) -> None:
    """Two panels against run clock (s): held-out accuracy, and ``reward_mean`` (trailing
    mean over :data:`SMOOTH` steps); one line per run, one colour per controller, the
    ``target`` accuracy dashed. Writes ``path``."""
    sns.set_theme(style="whitegrid", context="paper")
    controllers = list(dict.fromkeys(runs["controller"].to_list()))
    colour = dict(zip(controllers, sns.color_palette(n_colors=len(controllers))))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for r in runs.iter_rows(named=True):
        c = colour[r["controller"]]
        label = (
            r["controller"]
            if r["seed"] == runs.filter(pl.col("controller") == r["controller"])["seed"].min()
            else None
        )
        ev = evals.filter(pl.col("run") == r["run"]).sort("step")
        axes[0].plot(ev["t_s"], ev["accuracy"], color=c, label=label, alpha=0.8)
        st = steps.filter(pl.col("run") == r["run"]).sort("step")
        smooth = np.convolve(st["reward_mean"].to_numpy(), np.ones(SMOOTH) / SMOOTH, "valid")
        axes[1].plot(st["t_s"].to_numpy()[SMOOTH - 1 :], smooth, color=c, alpha=0.8)
    if target is not None:
        axes[0].axhline(target, ls="--", color="grey", lw=1)
    axes[0].set(xlabel="run clock (s)", ylabel="held-out accuracy (sampled)")
    axes[1].set(xlabel="run clock (s)", ylabel=f"reward, trailing mean of {SMOOTH} steps")
    axes[0].legend(title="controller")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
