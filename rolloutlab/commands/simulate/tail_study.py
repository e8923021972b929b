"""``rolloutlab tail-study``: rank the ways of attacking the long tail on one scenario."""

from __future__ import annotations

import dataclasses

import click

from rolloutlab.commands.options.common import claimed, fail, renamed_option
from rolloutlab.commands.options.scenario import OPTIONS, config_head, load_run, run_options
from rolloutlab.commands.options.terminal import echo_table, progress
from rolloutlab.commands.options.types import PROMPTS, STEPS
from rolloutlab.sim.engine.speculative import SPECULATIVE_SYNTAX, parse_speculative
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.provenance import scenario_source, write_config
from rolloutlab.sim.studies.tail import default_arms, run_tail_study

_SCENARIO = (0, 1, 3, 4, 5, 7, 8)
"""The shared scenario options it takes (:data:`rolloutlab.commands.options.scenario.OPTIONS`):
not ``--controller`` (the arms fix them) nor ``--kv-cache`` (the study runs without KV pressure)."""


def _scenario_options(command):
    for i in reversed(_SCENARIO):
        command = OPTIONS[i](command)
    return command


@click.command("tail-study")
@_scenario_options
@click.option("--steps", type=STEPS, help="Learner steps per run (default: scenario's).")
@click.option("--prompts", type=PROMPTS, help="Prompt batch B (default: scenario's).")
@click.option(
    "--group-size",
    "G",
    type=click.IntRange(min=1, max=4096),
    default=8,
    show_default=True,
    help="G of the static arms (SAGC chooses its own).",
)
@click.option(
    "--speculative",
    "speculative_text",
    default="4:0.7",
    show_default=True,
    metavar=SPECULATIVE_SYNTAX,
    help="Speculative decoding of the two speculative arms (tail= is set by --tail).",
)
@renamed_option("--spec", "--speculative", "speculative_text", metavar=SPECULATIVE_SYNTAX)
@click.option(
    "--tail",
    "tail_below",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="Tail-only arm: speculate below this many running sequences per worker.",
)
@click.option(
    "--seeds",
    type=click.IntRange(min=1, max=100),
    default=3,
    show_default=True,
    help="Seeds 0..N-1 (prompt stream, lengths, acceptance draws); the table gives the spread.",
)
@run_options
def tail_study(steps, prompts, G, speculative_text, tail_below, seeds, out, **opts):
    """Rank the tail fixes (SAGC, tail batching, partial rollouts, speculative decoding) by time to target.

    Writes OUT/tail_study.csv (one row per arm, ranked), runs.csv (one row per arm and
    seed) and config.json, and prints the table (docs/pipelines.md "Tail fixes compared").
    """
    opts["kv_cache"] = False
    sc, rewards, dynamic, target = load_run(opts, engine="simpy")
    try:
        if dynamic is not None:
            raise ValueError("--dynamic-sampling: the tail study compares plain steps")
        cfg = RunConfig(
            steps=steps or sc.run_defaults.steps,
            prompts=prompts or sc.run_defaults.prompts,
            dataset_size=opts["dataset_size"],
            rewards=rewards,
        )
        speculative = parse_speculative(speculative_text, lr=cfg.lr)
        speculative.check_batch(sc.engine.max_num_seqs)
        dataclasses.replace(speculative, tail_below=tail_below).check_batch(sc.engine.max_num_seqs)
        arms = default_arms(G, speculative, tail_below)
    except ValueError as exc:
        fail(exc)
    with claimed(out, "tail-study") as out_dir:
        with progress(len(arms) * seeds, "simulating", "run") as bar:
            table, runs = run_tail_study(
                sc, cfg, arms, range(seeds), target, on_run=lambda *_: bar.update()
            )
        table.write_csv(out_dir / "tail_study.csv")
        runs.write_csv(out_dir / "runs.csv")
        write_config(
            out_dir / "config.json",
            {
                **config_head("tail-study", sc, "simpy", opts),
                "run": dataclasses.asdict(dataclasses.replace(cfg, rewards=None)),
                "arms": [
                    {
                        **dataclasses.asdict(a),
                        "speculative": a.speculative and dataclasses.asdict(a.speculative),
                    }
                    for a in arms
                ],
                "seeds": seeds,
                "target_reward": target,
                "engine": dataclasses.asdict(sc.engine),
                "cost": sc.cost.to_dict(),
                "calibration": scenario_source(sc),
            },
        )
    echo_table(table, rows=20)
    missed = int(table["time_to_target_s"].fill_null(float("nan")).is_nan().sum())
    if missed:  # (ranked last, in declaration order: say so rather than imply an order)
        click.echo(
            f"note: {missed} of {table.height} arms did not reach reward {target} within "
            f"{cfg.steps} steps (time_to_target_s NaN); they are ranked last in declaration "
            "order: raise --steps",
            err=True,
        )
    click.echo(f"wrote {out_dir}/tail_study.csv, runs.csv, config.json")
