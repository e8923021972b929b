"""``rolloutlab sim``: compare group-size controllers on one calibrated scenario.

Only what the options need is imported with the module: the simulator (numpy, polars)
is imported when the command runs, so ``rolloutlab sim --help`` imports neither.
"""

from __future__ import annotations

import click

from rolloutlab.commands.options.common import claimed, fail, renamed_option
from rolloutlab.commands.options.scenario import (
    WITHOUT_STEP_PHASES,
    config_head,
    load_run,
    run_options,
    scenario_options,
    without_step_phases,
)
from rolloutlab.commands.options.terminal import echo_table, progress
from rolloutlab.commands.options.types import PROMPTS, STEPS, WORKERS
from rolloutlab.commands.simulate.verl import (
    VERL_OPTION,
    echo_mapping,
    merge_verl,
    updates_source,
    verl_record,
)
from rolloutlab.sim.models.hardware import get_gpu, get_model
from rolloutlab.sim.models.learner_cost import WEIGHT_TRANSFERS, Network
from rolloutlab.sim.pipelines.spec import PLACEMENTS, SYNC_MODES, parse_pipeline

SPECULATIVE = "K:ALPHA[:tail=N][:draft=F][:drift=D][:refresh=R]"
"""``--speculative``'s syntax (:data:`sim.engine.speculative.SPECULATIVE_SYNTAX`, written
out so that ``--help`` imports no numpy; a test holds the two equal)."""


@click.command()
@scenario_options
@click.option("--steps", type=STEPS, help="Learner steps (default: scenario's).")
@click.option("--prompts", type=PROMPTS, help="Prompt batch B (default: scenario's).")
@click.option("--workers", type=WORKERS, help="Engine replicas W (default: scenario's).")
@click.option(
    "--pipeline",
    "pipeline",
    default="sync",
    show_default=True,
    help="Comma-separated pipelines: sync, one-step-off, interval:S, bounded:S, "
    "partial:S[:chunk=T], oversample:R, groupover:N/K, async:S[:queue=N:full=block|drop_oldest:"
    "threshold=F:sync_every=K:concurrency=N]; any takes :sync=MODE (docs/pipelines.md).",
)
@click.option(
    "--sync-mode",
    type=click.Choice(SYNC_MODES),
    default=SYNC_MODES[0],
    show_default=True,
    help="Weight sync: swap weights between decode iterations (inflight, PipelineRL), "
    "wait for in-flight rollouts (drain) or abort and resume them (abort). A pipeline's "
    ":sync=MODE wins.",
)
@click.option(
    "--placement",
    type=click.Choice(PLACEMENTS),
    default="separate",
    show_default=True,
    help="Generation and learner on separate devices, or colocated and time-sliced.",
)
@click.option(
    "--engine",
    type=click.Choice(["simpy", "fast"]),
    default="simpy",
    show_default=True,
    help="SimPy engine (reference; KV pressure) or the vectorised fast path (sync only).",
)
@click.option(
    "--dispatch",
    help="Requests to workers: round_robin, least_loaded, group, shared (one queue, each "
    "free slot takes the next request) or deferred:T (at most T waiting on a worker); "
    "default: the scenario's (docs/pipelines.md).",
)
@click.option(
    "--sandboxes",
    type=click.IntRange(min=1, max=1_000_000),
    help="Multi-turn scenarios: tool calls running at once (default: the scenario's; "
    "docs/multi_turn.md).",
)
@click.option(
    "--park",
    is_flag=True,
    help="RollPacker: oversample:R prompts left unfinished are re-run later as a "
    "long-tail batch instead of lost (oversample pipelines only).",
)
@click.option(
    "--speculative",
    "speculative",
    metavar=SPECULATIVE,
    help="Speculative decoding on every worker: draft length K, acceptance ALPHA per token; "
    "tail=N speculates only below N running sequences; draft=F drafter cost / target "
    "iteration; drift=D, refresh=R acceptance decay with steps x lr (docs/engine.md). "
    "Synchronous pipelines; with the KV cache model too (no token budget).",
)
@renamed_option("--spec", "--speculative", "speculative", metavar=SPECULATIVE)
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Seed of the prompt stream (>= 0); every controller sees the same prompts.",
)
@click.option(
    "--updates-per-batch",
    type=click.IntRange(min=1, max=100_000),
    default=1,
    show_default=True,
    help="K optimizer updates per rollout batch (mini-batches of B/K prompts, verl's "
    "ceil(train_batch_size / ppo_mini_batch_size) x ppo_epochs); mini-batch j trains j "
    "updates off-policy. Must divide --prompts. With --verl-config: the file's, unless "
    "given here.",
)
@click.option(
    "--gpus",
    type=click.IntRange(min=1),
    help="GPUs of the run (with --model/--gpu): --split R:T of them generate and train "
    "(separate), or all do both (--placement colocated); sets the workers, learner and "
    "sync costs (docs/pipelines.md, 'Placement and split').",
)
@click.option("--split", "split_spec", metavar="R:T", help="Rollout GPUs : trainer GPUs.")
@click.option(
    "--weight-sync",
    type=click.Choice(WEIGHT_TRANSFERS),
    default="broadcast",
    show_default=True,
    help="With --gpus: weights sent to the replicas by a pipelined broadcast or one "
    "replica after another.",
)
@click.option(
    "--net-gbps",
    type=float,
    default=50.0,
    show_default=True,
    help="With --gpus: network bandwidth per GPU across nodes (GB/s).",
)
@click.option(
    "--learner-phases",
    metavar="P,P",
    help="With --gpus: the learner phases charged per step, verl's timing keys "
    "(old_log_prob, ref, update_actor; default all three). verl fully-async with rollout "
    "log-probs and no KL runs update_actor only.",
)
@click.option(
    "--figure/--no-figure",
    default=True,
    show_default=True,
    help="Draw OUT/comparison.png (seaborn; about half of a 100-step run's time).",
)
@VERL_OPTION
@WITHOUT_STEP_PHASES
@run_options
@click.pass_context
def sim(
    ctx,
    steps,
    prompts,
    workers,
    pipeline,
    sync_mode,
    placement,
    engine,
    dispatch,
    sandboxes,
    park,
    speculative,
    seed,
    updates_per_batch,
    gpus,
    split_spec,
    weight_sync,
    net_gbps,
    learner_phases,
    figure,
    out,
    verl_config,
    **opts,
):
    """Simulate GRPO under each controller and pipeline on the same prompt stream.

    Writes OUT/summary.csv (one row per controller and pipeline), rollouts.parquet, steps.parquet,
    comparison.png (unless --no-figure), config.json and, with --updates-per-batch K > 1,
    updates.parquet (one row per optimizer update), and prints the comparison table.
    """
    from rolloutlab.sim.control.controllers import split_specs
    from rolloutlab.sim.engine.speculative import parse_speculative
    from rolloutlab.sim.pipelines.sync import RunConfig
    from rolloutlab.sim.scenario.overrides import apply_overrides, with_speculative
    from rolloutlab.sim.scenario.placement import parse_phases
    from rolloutlab.sim.studies.compare import compare_study, plan_comparison

    verl = None
    if verl_config:  # the file's settings, where the command line sets none
        verl, params, overridden = merge_verl(ctx, verl_config)
        steps, prompts, pipeline, placement, updates_per_batch = (params[k] for k in SET_BY_VERL)
        opts.update({k: params[k] for k in opts})
        echo_mapping(verl, overridden)
        click.echo(updates_source(verl, updates_per_batch, "--updates-per-batch" in overridden))
        if "--updates-per-batch" not in overridden and prompts and prompts % updates_per_batch:
            fail(
                ValueError(
                    f"{verl_config}: fields actor_rollout_ref.actor.ppo_mini_batch_size and "
                    f".ppo_epochs give K = {updates_per_batch} updates per batch, which does "
                    f"not divide B = {prompts} prompts (the simulator trains K equal "
                    "mini-batches): give --updates-per-batch with a divisor of B"
                )
            )
    sc, rewards, dynamic, target_reward = load_run(opts, engine=engine, workers=workers, verl=verl)
    drop_phases = opts.pop("without_step_phases")
    sc = without_step_phases(sc, drop_phases)
    try:
        sc = apply_overrides(sc, engine=engine, dispatch=dispatch, sandboxes=sandboxes)
        if learner_phases is not None and not gpus:
            raise ValueError("--learner-phases needs --gpus N (the learner is priced from it)")
        if gpus or split_spec:
            phases = parse_phases(learner_phases) if learner_phases is not None else None
            sc = _placed(
                sc, opts, gpus, split_spec, placement, weight_sync, net_gbps, workers, phases
            )
        cfg = RunConfig(
            steps=steps or sc.run_defaults.steps,
            prompts=prompts or sc.run_defaults.prompts,
            seed=seed,
            dataset_size=opts["dataset_size"],
            rewards=rewards,
            dynamic=dynamic,
            updates_per_batch=updates_per_batch,
            lr=float(sc.defaults.get("lr", RunConfig.lr)),  # a verl config's optim.lr
        )
        specs = split_specs(opts["controllers"])
        pipes = [
            parse_pipeline(p, placement, park, sync_mode=sync_mode)
            for p in pipeline.split(",")
            if p.strip()
        ]
        if speculative:
            sc = with_speculative(sc, parse_speculative(speculative, lr=cfg.lr, seed=seed), pipes)
        plan = plan_comparison(sc, specs, cfg, pipes, engine, target_reward)
    except ValueError as exc:
        fail(exc)
    with claimed(out, "sim") as out_dir:  # after every check, before minutes of simulation
        with progress(cfg.steps * len(specs) * len(pipes), "simulating", "step") as bar:

            def on_step(spec: str, t: int, G: int) -> None:
                bar.set_postfix_str(f"{spec} G={G}", refresh=False)
                bar.update()

            result = compare_study(
                plan, out_dir, on_step=on_step, figure=_comparison_figure if figure else None,
                record=(
                    config_head("sim", sc, engine, opts),
                    ({"verl_config": verl_record(verl)} if verl else {})
                    | ({"step_phases": "left out (--without-step-phases)"} if drop_phases else {}),
                ),
            )  # fmt: skip
    _echo_comparison(result, sc, cfg, pipes, target_reward)
    figure_file = " comparison.png," if figure else ""
    figure_file += (" turns.parquet," if result.turns else "") + (
        " updates.parquet," if result.updates else ""
    )
    click.echo(
        f"wrote {out_dir}/summary.csv, rollouts.parquet, steps.parquet,{figure_file} config.json"
    )


def _echo_comparison(result, sc, cfg, pipes, target_reward: float | None) -> None:
    """Print the study's headline and tables, and a line for each thing in them a reader
    could take for a bug (no rewards, step phases, dynamic-sampling aborts, empty targets)."""
    from rolloutlab.sim.models.reward_metrics import DYNAMIC_SAMPLING_COLUMNS
    from rolloutlab.sim.studies.compare import summary_notes
    from rolloutlab.sim.trace.turn_metrics import TURN_COLUMNS

    summary, steps_df, tau = result.summary, result.steps, sc.run_defaults.tau
    click.echo(
        f"scenario {sc.name}: {cfg.steps} steps x {cfg.prompts} prompts, "
        f"{sc.engine.n_workers} worker{'s' if sc.engine.n_workers != 1 else ''}, tau={tau:g}"
    )
    echo_table(summary.select(_printed_columns(pipes, cfg.rewards is not None)), rows=50)
    if result.turns:
        echo_table(summary.select("controller", "pipeline", *TURN_COLUMNS), rows=50)
    if cfg.rewards is None:
        click.echo(
            f"no rewards: scenario {sc.name} has no pass rates, so no reward and no time to "
            "target (--pass-rate fixed:P|beta:A,B|FILE, or `rolloutlab calibrate learning`)"
        )
    if sc.step_phases is not None and "reward_wait_s" in steps_df.columns:
        from rolloutlab.sim.trace.metrics import phase_means

        click.echo(
            f"scenario {sc.name} prices the step's reward and periodic phases "
            "(docs/step_phases.md); mean s per step of each run (steps.parquet: t_end - "
            "t_start, gen_time, train_time, sync_time, reward_wait_s = reward wait + "
            "advantage, periodic_s = validation/checkpoint; asynchronous pipelines overlap "
            "them):"
        )
        echo_table(phase_means(steps_df), rows=50, precision=1)
    if DYNAMIC_SAMPLING_COLUMNS[0] in summary.columns:  # what the filter cost, separately
        echo_table(summary.select("controller", "pipeline", *DYNAMIC_SAMPLING_COLUMNS), rows=50)
    for note in summary_notes(summary, cfg, target_reward):
        click.echo(note)


def _comparison_figure(rollouts, steps, path, tau: float, target: float | None) -> None:
    """:func:`analysis.figures.plots.comparison_figure`, imported when drawn (why: seaborn
    costs ~1.5 s, and ``--no-figure`` runs never pay it)."""
    from rolloutlab.analysis.figures.plots import comparison_figure

    comparison_figure(rollouts, steps, path, tau, target)


def _placed(sc, opts, gpus, split_spec, placement, weight_sync, net_gbps, workers, phases=None):
    """The scenario on ``--gpus`` (:func:`sim.scenario.placement.apply_split`), charging
    ``phases`` (verl timing keys; all three when None). Raises ValueError naming the option
    that is missing, conflicting or out of range."""
    from rolloutlab.sim.scenario.placement import apply_split, parse_split

    if not gpus:
        raise ValueError("--split needs --gpus N")
    if not (opts.get("model") and opts.get("gpu")):
        raise ValueError("--gpus needs --model and --gpu (learner and sync costs follow from them)")
    if workers:
        raise ValueError("--gpus sets the workers (rollout GPUs / --tp); leave out --workers")
    split = parse_split(gpus, split_spec, opts.get("tp") or 1, placement == "colocated")
    net = Network(net_bytes_per_s=net_gbps * 1e9)
    chosen = {} if phases is None else {"phases": phases}
    model, gpu = get_model(opts["model"]), get_gpu(opts["gpu"])
    return apply_split(sc, split, model, gpu, net, weight_sync, **chosen)


SET_BY_VERL = ("steps", "prompts", "pipeline", "placement", "updates_per_batch")
"""The parameters of :func:`sim` (besides ``opts``) that ``--verl-config`` may set."""


def _printed_columns(pipes, rewards: bool = False) -> list[str]:
    """The summary columns worth printing: staleness columns only for asynchronous runs,
    reward columns only for runs with rewards."""
    from rolloutlab.sim.models.reward_metrics import LEARNING_COLUMNS
    from rolloutlab.sim.studies.compare import ASYNC_COLUMNS, RUN_COLUMNS

    cols = list(RUN_COLUMNS)
    if any(p.kind != "sync" for p in pipes):
        cols = [c for c in cols if c not in ("gen_time_s", "rollouts")] + list(ASYNC_COLUMNS)
    return cols + list(LEARNING_COLUMNS) if rewards else cols
