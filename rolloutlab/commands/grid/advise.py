"""``rolloutlab advise``: search G policy, B, workers, max_num_seqs, pipeline, learning
rate and optimizer updates per rollout batch (K) for the fastest setting without
stragglers or a predicted collapse (Optuna,
:mod:`rolloutlab.analysis.advise.search`), its trials priced in parallel by a grid executor."""

from __future__ import annotations

import json
from pathlib import Path

import click
import polars as pl
from click.core import ParameterSource

from rolloutlab.analysis.advise.evaluate import HORIZON_COLUMNS
from rolloutlab.analysis.advise.search import (
    OBJECTIVES,
    Constraints,
    SearchSpace,
    explain_infeasible,
)
from rolloutlab.analysis.advise.study import AdviseResult, Placement, advise_study
from rolloutlab.calibration.scenarios.run_scale import neighbourhood, run_scale
from rolloutlab.commands.grid.executor import ExecutorError
from rolloutlab.commands.grid.options import describe_executor, executor_from, executor_options
from rolloutlab.commands.options.common import claim, fail, parse_list, renamed_option
from rolloutlab.commands.options.scenario import (
    WITHOUT_STEP_PHASES,
    config_head,
    load_run,
    run_options,
    scenario_options,
    without_step_phases,
)
from rolloutlab.commands.options.terminal import echo_table
from rolloutlab.commands.options.types import (
    MAX_PROMPTS,
    MAX_WORKERS,
    POSITIVE_INT,
    STEPS,
    CommaList,
)
from rolloutlab.real.rundir.extras import MissingExtra
from rolloutlab.sim.control.controllers import split_specs
from rolloutlab.sim.models.hardware import get_gpu, get_model
from rolloutlab.sim.pipelines.registry import check_step_phases
from rolloutlab.sim.pipelines.spec import parse_pipeline
from rolloutlab.sim.scenario.placement import check_memory, parse_split
from rolloutlab.sim.scenario.provenance import describe_rewards


def _bounded(limit: int) -> tuple:
    """``(check, expected)`` of :func:`parse_list` for integers in [1, ``limit``]."""
    return (lambda v: 1 <= v <= limit), f"integers in [1, {limit}]"


def _splits(gpus: int | None, splits: str | None, opts: dict) -> tuple[str, ...]:
    """``--split`` checked against ``--gpus`` (each one a valid split of them, the model
    fitting its GPUs), or ``()`` without them. Raises ValueError naming the option."""
    if not (gpus or splits):
        return ()
    if not (gpus and splits):
        raise ValueError("--gpus and --split go together")
    if not (opts.get("model") and opts.get("gpu")):
        raise ValueError("--gpus needs --model and --gpu (learner and sync costs follow from them)")
    if opts.get("accelerators") is not None:
        raise ValueError("--gpus sets the GPU budget; leave out --rollout-gpus")
    out = tuple(p.strip() for p in splits.split(",") if p.strip())
    tp = opts.get("tp") or 1
    for spec in out:
        check_memory(parse_split(gpus, spec, tp), get_model(opts["model"]), get_gpu(opts["gpu"]))
    return out


_OPTION = {"pipelines": "pipeline", "controllers": "controller"}
"""Searched settings whose option is not the key's spelling."""


def _given(names: tuple[str, ...]) -> set[str]:
    """The options among ``names`` given on the command line (not left at their default)."""
    ctx = click.get_current_context()
    return {n for n in names if ctx.get_parameter_source(n) != ParameterSource.DEFAULT}


def _list(name: str, default: str, what: str, dest: str | None = None):
    decls = (name,) if dest is None else (name, dest)
    return click.option(*decls, default=default, show_default=True, help=what)


@click.command()
@scenario_options
@_list("--prompts", "16,32,64", "Prompt batches B to search.")
@_list("--workers", "1,2,4", "Engine replica counts W to search (each `--tp` GPUs).")
@_list("--max-num-seqs", "256,1024", "vLLM max_num_seqs per worker to search.")
@_list(
    "--pipeline",
    "sync,one-step-off,bounded:2,bounded:4",
    "Pipelines (and S) to search.",
    "pipelines",
)
@renamed_option("--pipelines", "--pipeline", "pipelines")
@_list("--lr", "5e-7,1e-6,2e-6,4e-6", "Learning rates to search.")
@click.option(
    "--updates-per-batch",
    type=CommaList(POSITIVE_INT),
    default="1",
    show_default=True,
    help="Optimizer updates per rollout batch K to search (mini-batches of B/K prompts, "
    "verl's train_batch_size / ppo_mini_batch_size); each must divide every --prompts.",
)
@click.option(
    "--steps",
    type=STEPS,
    default=60,
    show_default=True,
    help="Learner steps simulated per trial.",
)
@click.option(
    "--trials", type=click.IntRange(min=1), default=100, show_default=True, help="Optuna trials."
)
@click.option(
    "--polish-trials",
    type=click.IntRange(min=0),
    default=None,
    help="After the search, settings the neighbour polish may price (one grid step in one "
    "knob from the answer, moving while a neighbour wins by more than the tie threshold, "
    "at most 3 rounds; analysis/advise/polish.py). Default: 2 per searched knob per "
    "round; 0: no polish.",
)
@click.option(
    "--parallel-trials",
    "batch",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Trials asked (and priced in parallel) at a time.",
)
@renamed_option("--batch", "--parallel-trials", "batch", type=click.IntRange(min=1))
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the sampler and of every simulated run.",
)
@click.option(
    "--max-straggler-rate",
    type=click.FloatRange(0, 1),
    default=0.5,
    show_default=True,
    help="Largest acceptable share of straggler steps, in [0, 1].",
)
@click.option(
    "--straggler-level",
    type=click.FloatRange(0, 1, max_open=True),
    default=None,
    help="Read stragglers per group: a step straggles when more than this share of its "
    "groups has max/median > tau (meaningful at B x G in the thousands, where every step "
    "passes tau; docs/controllers.md). Default: the step-level ratio.",
)
@click.option(
    "--min-collapse-margin",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="eta_max / eta; 1 = at the predicted boundary.",
)
@click.option(
    "--horizon",
    "horizon_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="horizon.json of a `rolloutlab stability` grid: report each trial's predicted "
    "collapse step with its seed interval (horizon law, docs/staleness.md).",
)
@click.option(
    "--rollout-gpus",
    "accelerators",
    type=click.IntRange(min=1),
    default=None,
    help="Budget of rollout GPUs (workers x --tp).",
)
@renamed_option("--accelerators", "--rollout-gpus", "accelerators", type=click.IntRange(min=1))
@run_options
@WITHOUT_STEP_PHASES
@executor_options
@click.option(
    "--gpus",
    type=click.IntRange(min=1),
    help="With --split and --model/--gpu: search how these GPUs split between rollout "
    "and training (the split sets the workers; docs/pipelines.md).",
)
@click.option(
    "--split", "splits", metavar="R:T[,R:T...]", help="Rollout:trainer GPU splits to search."
)
@renamed_option("--splits", "--split", "splits", metavar="R:T[,R:T...]")
@click.option(
    "--objective",
    type=click.Choice(OBJECTIVES),
    default="time",
    show_default=True,
    help="Minimise the time objective (s), or GPU-hours (it x the setting's GPUs / 3600).",
)
def advise(
    prompts, workers, max_num_seqs, pipelines, lr, updates_per_batch, steps, trials,
    polish_trials, batch, seed, out, gpus, splits, horizon_path, objective,
    **opts,
):  # fmt: skip
    """Search the settings for the fastest one that is safe (stragglers, collapse).

    Searches for the setting with the smallest predicted time to the target reward
    (time per step when the scenario has no learning model) whose straggler rate and
    collapse margin stay within bounds. With --updates-per-batch K the margin counts the
    K - 1 updates a batch's last mini-batch trains off-policy (span S_max + K).

    Writes OUT/trials.csv (every trial), pareto.csv (feasible trials not beaten on time,
    straggler rate and collapse margin together), advise.png and config.json; prints the
    Pareto table and the chosen setting.

    After the search, a neighbour polish walks from its answer: it prices each setting one
    grid step away in one knob and moves to the fastest while it wins by more than the tie
    threshold below (--polish-trials; those trials are in trials.csv with origin
    "polish"); the answer is the fastest feasible setting of search and polish together.

    Under the answer: one line per model assumption the scenario (calibration file) did
    not measure (learning gain linear in lr, progress independent of B with b_noise = 0,
    no saturation, the staleness model's eta_ref, an assumed reward latency law), then
    the polish's line, each searched knob of the chosen setting against its runner-up, the fastest feasible
    setting that differs in that knob alone (priced after the search if the search had
    not). A choice is a tie when |runner-up / chosen - 1| <= max(run-to-run spread, 1 %),
    the spread being the relative sd of the chosen setting's objective over 3 seeds.
    """
    sc, rewards, dynamic, target = load_run(opts, engine="simpy")
    drop_phases = opts.pop("without_step_phases")
    sc = without_step_phases(sc, drop_phases)
    given = _given(("prompts", "workers", "max_num_seqs", "pipelines", "controllers"))
    if opts.get("calibration"):  # around the calibrated run, unless the options say otherwise
        searched = around_calibrated_run(sc, given)
        prompts = searched.get("prompts", prompts)
        workers = searched.get("workers", workers)
        max_num_seqs = searched.get("max_num_seqs", max_num_seqs)
        pipelines = searched.get("pipelines", pipelines)
        opts["controllers"] = searched.get("controllers", opts["controllers"])
    if sc.step_phases is not None and "pipelines" not in given:
        pipelines = "sync"
        click.echo(
            f"scenario {sc.name} has reward/periodic step phases, priced by the synchronous "
            "pipeline only: --pipeline sync"
        )
    horizon = None
    if horizon_path is not None:
        from rolloutlab.sim.models.horizon import HorizonInputError, fit_from_dict

        try:
            horizon = fit_from_dict(json.loads(horizon_path.read_text()))
        except (ValueError, HorizonInputError) as exc:
            fail(ValueError(f"{horizon_path}: {exc}"))
    try:
        if dynamic is not None:
            raise ValueError("--dynamic-sampling: not searched by advise")
        space, constraints = _search_space(
            sc, prompts, workers, max_num_seqs, pipelines, lr, updates_per_batch, gpus, splits, opts
        )
    except ValueError as exc:
        fail(exc)
    executor = executor_from(opts)
    try:
        executor.check()
    except (ExecutorError, MissingExtra) as exc:
        fail(exc)
    out_dir = claim(out, "advise")
    tp = opts["tp"] or 1
    result = advise_study(
        space, constraints, sc, rewards, target, executor, out_dir,
        steps=steps, trials=trials, batch=batch, seed=seed, objective=objective, tp=tp,
        placement=Placement(gpus, tp, opts["model"], opts["gpu"]) if space.split else None,
        dataset_size=opts["dataset_size"], straggler_level=opts["straggler_level"],
        horizon=horizon, polish_trials=polish_trials,
        record=(
            config_head("advise", sc, "simpy", opts),
            {
                **describe_rewards(rewards, dynamic, target),
                **describe_executor(opts),
                **({"step_phases": "left out (--without-step-phases)"} if drop_phases else {}),
            },
        ),
    )  # fmt: skip
    _echo_advice(result, sc.name, trials)
    click.echo(f"wrote {out_dir}/trials.csv, pareto.csv, advise.png, config.json")


def around_calibrated_run(sc, given: set[str]) -> dict[str, str]:
    """The searched options :func:`neighbourhood` sets around the calibrated run's scale,
    less those ``given`` on the command line; says so in one line."""
    scale = run_scale(sc)
    searched = {k: v for k, v in neighbourhood(scale).items() if k not in given}
    click.echo(
        f"searching around the calibrated run: B = {scale.prompts} "
        f"({scale.sources['prompts']}), G = {scale.group_size} "
        f"({scale.sources['group_size']}), {scale.workers} workers "
        f"({scale.sources['workers']}), max_num_seqs {scale.max_num_seqs}, placement "
        f"{scale.placement or 'colocated'} ({scale.sources['placement']}); "
        + (
            " ".join(f"--{_OPTION.get(k, k.replace('_', '-'))} {v}" for k, v in searched.items())
            if searched
            else "every searched option given on the command line"
        )
    )
    return searched


def _search_space(
    sc, prompts, workers, max_num_seqs, pipelines, lr, updates_per_batch, gpus, splits, opts
) -> tuple[SearchSpace, Constraints]:
    """The search space and constraints the options give. Raises ValueError naming the
    option: a pipeline other than sync on a scenario with step phases, a bad list or
    split, an accelerator budget no worker count fits, a dataset smaller than a batch."""
    for spec in pipelines.split(","):
        try:
            check_step_phases(sc, parse_pipeline(spec))
        except ValueError as exc:
            raise ValueError(f"--pipeline {spec.strip()}: {exc}") from None
    split = _splits(gpus, splits, opts)
    space = SearchSpace(
        controller=tuple(split_specs(opts["controllers"])),
        prompts=tuple(parse_list("--prompts", prompts, int, *_bounded(MAX_PROMPTS))),
        workers=(1,)  # a placeholder: each split sets its workers
        if split
        else tuple(parse_list("--workers", workers, int, *_bounded(MAX_WORKERS))),
        max_num_seqs=tuple(
            parse_list("--max-num-seqs", max_num_seqs, int, lambda v: v >= 1, "integers >= 1")
        ),
        pipeline=tuple(p.strip() for p in pipelines.split(",") if p.strip()),
        lr=tuple(parse_list("--lr", lr, float, lambda v: 0 < v < 1, "numbers in (0, 1)")),
        updates_per_batch=tuple(updates_per_batch),
        split=split,
    )
    constraints = Constraints(
        opts["max_straggler_rate"],
        opts["min_collapse_margin"],
        opts["accelerators"],
        opts["tp"],
    )
    constraints.prune(space)  # only to refuse a budget no worker count fits, before --out
    if opts["dataset_size"] is not None and opts["dataset_size"] < max(space.prompts):
        raise ValueError(f"--dataset-size {opts['dataset_size']}: below the largest --prompts")
    return space, constraints


def _echo_advice(result: AdviseResult, scenario: str, trials: int) -> None:
    """Print the study's headline, its Pareto table and the chosen setting (or why none is
    feasible, with the closest trials)."""
    table, pareto, use_target = result.trials, result.pareto, result.use_target
    space, constraints, target = result.space, result.constraints, result.target
    level = result.straggler_level
    click.echo(
        f"scenario {scenario}: {trials} trials over {space.size()} settings, objective "
        f"{'time_to_target_s (reward ' + str(target) + ')' if use_target else 'time_per_step_s'}; "
        f"straggler rate <= {constraints.max_straggler_rate}"
        + (f" (group reading: share of groups over tau > {level})" if level is not None else "")
        + ", collapse margin >= "
        f"{constraints.min_collapse_margin}"
    )
    echo_table(
        pareto.with_columns(pl.col("lr").map_elements(lambda v: f"{v:g}", pl.String)).select(
            *space.keys,
            "time_s",
            *(("gpu_hours",) if result.objective == "gpu-hours" else ()),
            "straggler_rate",
            "collapse_margin",
            *(HORIZON_COLUMNS if result.horizon else ()),
            "wall_clock_s",
            "best",
        ),
        rows=50,
    )
    best = table.filter("best")
    if best.height:
        b = best.row(0, named=True)
        click.echo(
            "best: " + " ".join(f"{k}={b[k]}" for k in space.keys) + f" time_s={b['time_s']:.0f}"
        )
        for line in result.caveat_lines():
            click.echo(line)
    else:
        line, closest = explain_infeasible(table, constraints, use_target)
        click.echo(f"best: none ({line})")
        if closest.height:
            click.echo("closest trials (smallest relative violation):")
            echo_table(
                closest.with_columns(
                    pl.col("lr").map_elements(lambda v: f"{v:g}", pl.String)
                ).select(*space.keys, "time_s", "straggler_rate", "collapse_margin", "violation"),
            )
