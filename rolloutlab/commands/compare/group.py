"""``rolloutlab compare`` (predicted against measured) and ``rolloutlab report`` (HTML).

``compare`` is the one verb for a prediction held against a measurement, whether the
measurement is a run's later steps, another run or a grid (``rolloutlab validate`` is
its deprecated spelling, :mod:`rolloutlab.cli`)."""

from __future__ import annotations

from pathlib import Path

import click

from rolloutlab.commands.compare.groups import compare_groups_cmd
from rolloutlab.commands.compare.horizon import horizon
from rolloutlab.commands.compare.learning_budget import learning_budget
from rolloutlab.commands.compare.replay import replay_cmd
from rolloutlab.commands.compare.run_spread import run_spread_cmd
from rolloutlab.commands.compare.scheduler import scheduler
from rolloutlab.commands.compare.verl_tb import validate_verl_tb
from rolloutlab.commands.options.common import (
    OUT_DIR,
    claimed,
    collapse_split,
    fail,
    out_option,
    real_option,
    renamed_option,
)
from rolloutlab.commands.options.terminal import echo_table
from rolloutlab.commands.options.types import STEPS, finite
from rolloutlab.sim.trace.progress import phase


@click.group()
def compare() -> None:
    """Put the simulator's predictions next to real measurements (held-out steps or runs).

    Every subcommand fits or calibrates on one part of the measurements (a run's first
    steps, some runs, half a grid) and predicts another. 'rolloutlab validate ...' is
    the deprecated spelling of verl-tb, groups, run-spread and replay."""


@compare.command()
@real_option(
    "Run directory with rollouts/steps traces and config.json (rolloutlab real sync).",
    file_okay=False,
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
    "--max-num-seqs",
    "capacity",
    type=click.IntRange(min=1),
    default=None,
    help="Engine slots per worker (vLLM's max_num_seqs) [default: the run's config].",
)
@renamed_option("--capacity", "--max-num-seqs", "capacity", type=click.IntRange(min=1))
@click.option(
    "--tau",
    type=finite(1.0, min_open=True),
    default=None,
    help="Straggler threshold on max/median length, > 1 [default: the run's].",
)
@click.option(
    "--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed (>= 0)."
)
@click.option(
    "--clock",
    type=click.Choice(["wall", "cpu", "probe"]),
    default="wall",
    show_default=True,
    help="Measured times on the wall clock, or each step's generation rescaled to its "
    "process CPU time (learner.jsonl cpu_gen_s; runs generating on this process's CPU: "
    "torch, or vLLM on CPU), which another process's load does not stretch; probe: the "
    "CPU time over the step's speed probe (timing_s/probe_model) relative to the fit steps' "
    "median, tool sleeps kept on the wall clock.",
)
@OUT_DIR
def idle(
    real_dir: Path, fit_steps, draws, length_model, capacity, tau, seed, clock, out_dir: Path
) -> None:
    """Generation makespan, slot idle fraction and stragglers: simulated against measured.

    Writes OUT/idle_comparison.csv (per step; predicted_* = the 'drawn' prediction),
    idle_summary.csv/.json, idle_scatter.png, idle_timeseries.png, replay_rollouts.parquet
    and config.json.
    """
    from rolloutlab.analysis.figures.compare_outputs import write_idle_outputs
    from rolloutlab.analysis.idle.compare import IdleCompareConfig, compare_idle
    from rolloutlab.analysis.idle.probe_clock import on_probe_clock
    from rolloutlab.analysis.inputs.run_input import RunInputError, load_run, on_cpu_clock
    from rolloutlab.sim.trace.schema import TraceError

    cfg = IdleCompareConfig(
        fit_steps=fit_steps, draws=draws, seed=seed, tau=tau, length_model=length_model, clock=clock
    )
    try:
        run = load_run(real_dir, capacity=capacity)
        if clock == "cpu":
            run = on_cpu_clock(run)
        elif clock == "probe":
            run = on_probe_clock(run, fit_steps)
    except (RunInputError, TraceError, ValueError) as exc:
        fail(exc)
    with claimed(out_dir, "compare-idle"):
        try:
            with phase(f"compare idle: {draws} draws over {run.steps.height} steps"):
                res = compare_idle(run, cfg)
        except (RunInputError, TraceError, ValueError) as exc:
            fail(exc)
        name = write_idle_outputs(run, res, cfg, out_dir)
    click.echo(
        f"{name}: fit on steps 0..{res.fit_steps - 1}, {res.summary['held_out_steps'][0]} held-out steps"
    )
    echo_table(res.summary)
    click.echo(f"-> {out_dir}")


@compare.command()
@real_option(
    "Measured stability grid: a directory with stability.csv (+ config.json), or the CSV.",
    exists=True,
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
    type=STEPS,
    default=None,
    help="Learner steps T per real run [default: the real grid's config.json].",
)
@collapse_split("lr")
@click.option(
    "--max-evals",
    type=click.IntRange(min=10),
    default=300,
    show_default=True,
    help="Model-grid evaluations of the fit.",
)
@OUT_DIR
def collapse(
    real_dir: Path, sim_dir: Path | None, steps, split, held_out, max_evals, out_dir: Path
) -> None:
    """Fit the collapse model on part of a measured stability grid and predict the rest.

    Writes OUT/collapse_points.csv (held-out runs, measured and predicted),
    collapse_scaling.csv (per S: S*eta_collapse and M_collapse*S*eta from the real grid,
    the fitted model and the simulated grid), collapse_summary.json (beside the model: the
    naive rules and the run-to-run floor), collapse.png, config.json.
    """
    from rolloutlab.analysis.collapse.baselines import score_table, verdict
    from rolloutlab.analysis.collapse.compare import GridError, grid_steps, read_grid, split_grid
    from rolloutlab.analysis.figures.compare_outputs import collapse_study, write_collapse_outputs

    if held_out is not None and split == "seed":
        raise click.BadParameter("needs --held-out-by lr or S", param_hint="--held-out-value")
    try:
        T = grid_steps(real_dir, steps)
        split_grid(
            read_grid(real_dir), split, held_out
        )  # a split that cannot be made: before --out
    except GridError as exc:
        fail(exc)
    with claimed(out_dir, "compare-collapse"):
        try:
            study = collapse_study(real_dir, sim_dir, T, split, max_evals, held_out)
        except GridError as exc:
            fail(exc)
        hold = study.summary.get("held_out_value")
        write_collapse_outputs(
            study,
            out_dir,
            f"{real_dir.name}: "
            + (
                f"{split} = {hold:g} held out"
                if hold is not None
                else f"fit on half the {split} values"
            ),
        )
    summary, fit, table = study.summary, study.fit, study.scaling
    h = summary["held_out"]
    click.echo(
        f"held-out runs: {h['points']}, classification agreement {h['agreement']:.3f}, "
        f"step MdAPE over the {h['both_collapsed']} runs collapsed on both sides "
        f"{h['t_collapse_mdape']:.3f}"
    )
    click.echo(
        f"beside the naive rules and the floor on the same held-out runs "
        f"({summary['baselines']['cells']} cells; mdape_all_collapsed: every collapsed held-out "
        "run, a prediction beyond T counted as T + 1; mdape_both_collapsed: the runs collapsed "
        "on both sides, each predictor's own; the model's probability is its class):"
    )
    echo_table(score_table("collapse model", summary["scores"], summary["baselines"]))
    click.echo(
        "collapse model against the best naive rule: "
        + verdict(summary["scores"], summary["baselines"]["rules"])
    )
    click.echo(
        "fitted: "
        + ", ".join(
            f"{k}={getattr(fit.params, k):.4g}"
            for k in ("lag_sensitivity", "sigma_prompt", "R_batch", "R_crit")
        )
    )
    echo_table(table)
    click.echo(f"-> {out_dir}")


@click.command()
@click.argument(
    "studies",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@OUT_DIR
def report(studies: tuple[Path, ...], out_dir: Path) -> None:
    """One self-contained HTML page per study directory, its answer first.

    Figures are embedded; each study's answer is printed too (100 columns)."""
    from rolloutlab.analysis.figures.report import (
        ReportError,
        page_names,
        printed_answer,
        write_reports,
    )
    from rolloutlab.sim.scenario.provenance import write_config

    try:
        page_names(list(studies))
    except ReportError as exc:
        fail(exc)
    with claimed(out_dir, "report"):
        paths, failed = write_reports(list(studies), out_dir)
        if not paths:  # nothing rendered: leave nothing behind
            fail(next(iter(failed.values())))
        written = [s for s in dict.fromkeys(studies) if s not in failed]
        write_config(
            out_dir / "config.json",
            {"command": "report", "studies": [str(s) for s in written],
             "not_written": {str(s): str(e) for s, e in failed.items()}},
        )  # fmt: skip
    for study, path in zip(written, paths):
        click.echo(f"wrote {path}")
        text = printed_answer(study)
        if text:
            click.echo(text + "\n")
    if failed:  # the other pages are written; the run still fails, naming each study
        for error in failed.values():
            click.echo(f"not written: {error}", err=True)
        fail(type(next(iter(failed.values())))(
            f"{len(failed)} of {len(written) + len(failed)} studies have no page (above)"))  # fmt: skip


@compare.command("learning")
@click.option(
    "--fit",
    "fit_dirs",
    required=True,
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The real run the models are fitted on (repeat for several seeds of one setting: a joint fit).",
)
@click.option(
    "--real",
    "real_dirs",
    required=True,
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="a real run to predict (repeat the option)",
)
@click.option(
    "--target-accuracy",
    required=True,
    type=finite(0.0, 1.0, min_open=True),
    help="Target in (0, 1]: a training reward (trailing mean of 10 steps), or with "
    "--target-on heldout a held-out accuracy.",
)
@out_option("Output directory (new, or an earlier compare learning output).")
@click.option(
    "--learning-model",
    type=click.Choice(["saturating", "linear"]),
    default="saturating",
    show_default=True,
    help="shape of the learning shift (docs/learning.md §2): saturating at a fitted capacity, "
    "or the simulator's default linear one",
)
@click.option(
    "--clock",
    type=click.Choice(["wall", "cpu"]),
    default="wall",
    show_default=True,
    help="time = wall clock, or the runs' process CPU time per step (learner.jsonl "
    "cpu_*_s; not stretched by a loaded machine)",
)
@click.option(
    "--draws",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="runs drawn from the fitted model per prediction (time to target = their median)",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Seed of the drawn runs (>= 0).",
)
@click.option(
    "--resimulate",
    "resim_draws",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="N > 0: also predict every adaptive run with its controller re-simulated "
    "(N drawn runs; columns resim_*), not only from the G it chose",
)
@click.option(
    "--target-on",
    type=click.Choice(["train", "heldout"]),
    default="train",
    show_default=True,
    help="what --target-accuracy scores: the trailing training reward (10 steps), or the "
    "runs' held-out evaluations (eval.jsonl accuracy; docs/learning.md §5)",
)
@click.option(
    "--cost-from",
    "cost_dirs",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Runs whose steps price the step cost instead of the --fit runs' (repeat): runs "
    "made on the machine, and in the machine state, of the --real runs (a CPU clock "
    "moves between sessions of a shared machine; docs/learning.md §5)",
)
@click.option(
    "--cost-law",
    type=click.Choice(["power", "mechanism"]),
    default="power",
    show_default=True,
    help="step price: c0 + c1 (B G)^p, or the step-cost law of engine calls, decoded rows, "
    "attended cache and trained cells (--clock cpu; docs/learning.md §5)",
)
def learning(
    fit_dirs: tuple[Path, ...],
    real_dirs: tuple[Path, ...],
    target_accuracy: float,
    learning_model: str,
    clock: str,
    draws: int,
    seed: int,
    resim_draws: int,
    target_on: str,
    cost_dirs: tuple[Path, ...],
    cost_law: str,
    out_dir: Path,
) -> None:
    """Calibrate the learning and cost models on --fit (the cost on --cost-from if given), predict every --real run's reward
    curve and time to target; DIR/learning_comparison.csv (per run),
    learning_comparison_by_controller.csv (runs of one controller and settings over their
    seeds: measured mean +- sd beside the predicted mean), learning_directions.csv (steps to
    target along G and B, measured against predicted; analysis/learning/directions.py),
    .png and fit.json."""

    from rolloutlab.analysis.learning.compare import learning_study

    with claimed(out_dir, "compare-learning"):
        try:
            study = learning_study(
                list(fit_dirs), list(real_dirs), target_accuracy, out_dir, learning_model,
                draws, seed, clock, resim_draws, target_on, list(cost_dirs), cost_law,
            )  # fmt: skip
        except ValueError as exc:
            hint = "--fit/--real/--cost-from" if cost_dirs else "--fit/--real"
            raise click.BadParameter(str(exc), param_hint=hint) from None
    echo_table(study.table)
    echo_table(study.groups)
    if study.directions.height:
        echo_table(study.directions)
    else:
        click.echo("learning_directions.csv: no two settings are neighbours along G or B", err=True)
    for line in study.notes:
        click.echo(line, err=True)
    click.echo(f"-> {out_dir}")


compare.add_command(scheduler)
compare.add_command(learning_budget)
compare.add_command(horizon)
compare.add_command(validate_verl_tb)
compare.add_command(compare_groups_cmd)
compare.add_command(run_spread_cmd)
compare.add_command(replay_cmd)
