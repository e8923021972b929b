"""``rolloutlab calibrate ...``: fit a scenario to real logs (wiring only; the vLLM
commands are in :mod:`rolloutlab.commands.calibrate.vllm`).

Every bad input ends in one line naming the file and tag/field, exit code 2, and no
output file (outputs are written atomically after all fitting succeeded).
"""

from __future__ import annotations

from pathlib import Path

import click
import polars as pl

from rolloutlab.calibration.fits.verl_fit import VerlFitConfig
from rolloutlab.calibration.readers.verl_tb import VerlLogError
from rolloutlab.calibration.scenarios.servegen import LongCotConfig, ServeGenError, build_longcot
from rolloutlab.calibration.scenarios.verl import calibrate_verl
from rolloutlab.calibration.scenarios.writer import write_json_atomic
from rolloutlab.commands.calibrate.groups import calibrate_groups_cmd
from rolloutlab.commands.calibrate.learning import calibrate_learning, calibrate_pass_rate
from rolloutlab.commands.calibrate.run_cost import run_cost_cmd
from rolloutlab.commands.calibrate.turns import calibrate_turns_cmd
from rolloutlab.commands.calibrate.vllm import vllm_compare, vllm_grid, vllm_steps
from rolloutlab.commands.options.common import (
    CALIBRATION_OUT,
    BadInput,
    cost_from_option,
    fail,
    renamed_option,
)
from rolloutlab.commands.options.terminal import echo_table
from rolloutlab.commands.options.types import (
    POSITIVE_INT,
    PROBABILITY,
    PROMPTS,
    STEPS,
    WORKERS,
    finite,
)
from rolloutlab.sim.control.tau import choose_tau
from rolloutlab.sim.engine.core import EngineConfig
from rolloutlab.sim.models.step_phases import RewardLatency
from rolloutlab.sim.scenario.scenario import CalibrationError, scenario_from_dict

BAD_INPUT = (VerlLogError, ServeGenError, CalibrationError, ValueError, OSError, BadInput)


def run_dir_args(paths) -> list[str]:
    """The RUN_DIRS arguments that can be verl runs (a folder, or an
    ``events.out.tfevents.*`` file); other files (``SOURCE.md`` of a shell glob like
    ``$R/*``) are skipped with a note on stderr. Raises BadInput when none is left."""
    keep = []
    for p in map(Path, paths):
        if p.is_file() and not p.name.startswith("events.out.tfevents."):
            click.echo(
                f"skipping {p}: not a run folder nor an events.out.tfevents.* file", err=True
            )
            continue
        keep.append(str(p))
    if not keep:
        raise BadInput(f"{', '.join(map(str, paths))}: no run folder among RUN_DIRS")
    return keep


def scenario_defaults(steps, tau, delta) -> dict:
    """The scenario defaults given on the command line (None = not given)."""
    return {k: v for k, v in (("steps", steps), ("tau", tau), ("delta", delta)) if v is not None}


def verl_config(
    *,
    group_size,
    max_response_length,
    logged_workers,
    max_num_seqs,
    fit_prefill,
    replicates,
    seed,
    reward_latency="uniform:1,40",
    reward_workers=256,
    reward_overlap=None,
) -> VerlFitConfig:
    """The :class:`VerlFitConfig` of the options of :func:`verl_options` (by name).
    Raises BadInput for a bad ``--reward-latency``."""
    return VerlFitConfig(
        group_size=group_size,
        max_response_length=max_response_length,
        engine=EngineConfig(n_workers=logged_workers, max_num_seqs=max_num_seqs),
        fit_prefill=fit_prefill,
        replicates=replicates,
        seed=seed,
        reward_latency=parse_reward_latency(reward_latency),
        reward_workers=reward_workers,
        reward_overlap=reward_overlap,
    )


def parse_reward_latency(spec: str) -> RewardLatency:
    """``constant:S``, ``uniform:A,B`` or ``lognormal:MEDIAN,SIGMA`` (seconds) as a
    :class:`RewardLatency`. Raises BadInput naming ``--reward-latency``."""
    kind, _, args = spec.partition(":")
    try:
        vals = [float(v) for v in args.split(",")] if args else []
        if len(vals) != (1 if kind == "constant" else 2):
            raise ValueError("expected constant:S, uniform:A,B or lognormal:MEDIAN,SIGMA")
        return RewardLatency(kind, *vals)
    except ValueError as exc:
        raise BadInput(f"--reward-latency {spec!r}: {exc}") from None


def echo_assumptions(d: dict) -> None:
    """Print, one line each, what a verl-tb calibration assumed where the log is silent
    (they are stored under ``provenance.assumptions``)."""
    a = d["provenance"]["assumptions"]
    lat = a["reward_latency_shape"]
    click.echo(
        f"assumed (the log does not say; stored in provenance.assumptions): G = {a['group_size']} "
        f"(--group-size), B = {a['logged_prompts']} (inferred: perf/total_num_tokens / "
        f"(response + prompt length) / G), {a['logged_engine']['n_workers']} engine "
        f"replicas (--logged-workers), max_num_seqs {a['logged_engine']['max_num_seqs']}, "
        f"placement {a['placement']}, reward latency shape {lat['kind']}({lat['a']:g}, "
        f"{lat['b']:g}) s x fitted scale (--reward-latency), {a['reward_workers']} reward "
        f"workers (--reward-workers), reward overlap {a['reward_overlap']}"
    )


def echo_tau(d: dict, delta: float = 0.3) -> None:
    """Print SAGC's ``tau`` at which the run's own G and B give the straggler rate
    ``delta``, under each reading (:func:`sim.control.tau.choose_tau`, from the fitted
    length model, 8 drawn steps)."""
    sc = scenario_from_dict(d)
    a = d["provenance"]["assumptions"]
    G, B = int(a["group_size"]), int(a["logged_prompts"])
    if G < 2:
        return
    taus = {r: choose_tau(sc.lengths, G, B, delta, r, steps=8) for r in ("group", "step")}
    click.echo(
        f"SAGC tau at which G = {G}, B = {B} straggles at rate {delta}: group reading "
        f"{taus['group']:.2f} (sagc:reading=group,tau={taus['group']:.2f},level={delta}), "
        f"step reading {taus['step']:.2f} (docs/controllers.md, 'Straggler readings')"
    )


def phase_rows(d: dict) -> pl.DataFrame:
    """Every ``timing_s/*`` phase of every run of a verl-tb calibration, one row each."""
    rows = []
    for run, block in d["fit"]["phases"].items():
        for r in block["phases"]:
            rows.append({"run": run, **r})
    if not rows:
        return pl.DataFrame()
    return pl.DataFrame(rows).sort(["run", "share"], descending=[False, True])


def echo_phases(d: dict) -> None:
    """Print each phase's share of ``timing_s/step``, what prices it, the share the
    calibration prices, the reward fit and the periodic phases."""
    rows = phase_rows(d)
    if rows.height:
        echo_table(
            rows.select("run", "phase", "kind", "steps_logged", "median_s", "share", "priced_by"),
            precision=3,
        )
    for run, block in d["fit"]["phases"].items():
        if block["explained_share"] is None:
            click.echo(f"{run}: {block['note']}")
            continue
        unpriced = [
            f"{r['phase']} {r['share']:.2%}"
            for r in block["phases"]
            if r["priced_by"] == "not priced" and r["share"] > 0
        ]
        click.echo(
            f"{run}: the calibration prices {block['explained_share']:.2%} of timing_s/step"
            + (f"; not priced: {', '.join(unpriced)}" if unpriced else "")
        )
    rep = d["fit"]["step_phases"]
    r = rep.get("reward")
    if r is not None:
        click.echo(
            f"reward phase: overlap {r['overlap']}"
            f"{' (read from the log)' if r['overlap_read_from_log'] else ''}; "
            + (
                f"median window {r['window_median_s']:.1f} s (cv {r['window_cv']:.3f}) over "
                f"{r['n_rollouts']} rollouts on {r['assumed_workers']} workers: fitted latency "
                f"scale {r['scale']:.3f} x the assumed law"
                if r["identified"]
                else r["note"]
            )
        )
    for p in rep.get("periodic", []):
        off = sorted({s for steps in p["off_period_steps_by_run"] for s in steps})
        click.echo(
            f"periodic phase {p['name']}: every {p['every']} steps, {p['seconds']:.1f} s"
            + (f" (also logged off the period at steps {off}: not priced)" if off else "")
        )


def scenario_default_options(f):
    """Options ``--steps``, ``--tau``, ``--delta``: defaults the written scenario carries."""
    opts = [
        click.option("--steps", type=STEPS, default=None, help="Scenario default steps."),
        click.option(
            "--tau",
            type=finite(1.0, min_open=True),
            default=None,
            help="Scenario default SAGC tau.",
        ),
        click.option(
            "--delta",
            type=PROBABILITY,
            default=None,
            help="Scenario default SAGC delta.",
        ),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def verl_options(f):
    """Options describing the logged runs (what the logs do not say)."""
    opts = [
        click.option(
            "--group-size",
            default=5,
            show_default=True,
            type=POSITIVE_INT,
            help="G of the logged runs (rollouts per prompt, >= 1).",
        ),
        click.option(
            "--max-response-length",
            default=1024,
            show_default=True,
            type=POSITIVE_INT,
            help="Response cap of the logged runs (tokens, >= 1).",
        ),
        click.option(
            "--logged-workers",
            "logged_workers",
            default=4,
            show_default=True,
            type=POSITIVE_INT,
            help="Engine replicas of the logged cluster (8 GPUs / rollout TP 2; >= 1); "
            "--workers sets the simulated cluster's.",
        ),
        renamed_option("--gen-workers", "--logged-workers", "logged_workers", type=POSITIVE_INT),
        click.option(
            "--max-num-seqs",
            default=1024,
            show_default=True,
            type=POSITIVE_INT,
            help="vLLM max_num_seqs of the logged runs (verl's default; >= 1).",
        ),
        click.option(
            "--fit-prefill", is_flag=True, help="Also fit prefill_s_per_token (not identified)."
        ),
        click.option(
            "--draws",
            "replicates",
            default=2,
            show_default=True,
            type=POSITIVE_INT,
            help="Length draws per step (>= 1).",
        ),
        renamed_option("--replicates", "--draws", "replicates", type=POSITIVE_INT),
        click.option(
            "--seed",
            default=0,
            show_default=True,
            type=click.IntRange(min=0),
            help="Seed of the length draws (>= 0).",
        ),
        click.option(
            "--reward-latency",
            default="uniform:1,40",
            show_default=True,
            help="Assumed shape of the per-rollout reward latency (s), scaled by the fit: "
            "constant:S, uniform:A,B or lognormal:MEDIAN,SIGMA (default: the "
            "async_reward_agent recipe's random.uniform(1, 40)).",
        ),
        click.option(
            "--reward-workers",
            default=256,
            show_default=True,
            type=POSITIVE_INT,
            help="Reward requests served at once (verl RayAsyncRewardAgent max_concurrency).",
        ),
        click.option(
            "--reward-overlap",
            type=click.Choice(["after", "learner", "generation"]),
            default=None,
            help="When rewards run (docs/step_phases.md); default: read from the tags.",
        ),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


@click.group()
def calibrate() -> None:
    """Fit a simulator scenario (calibration JSON) to real logs."""


@calibrate.command("verl-tb")
@click.argument("run_dirs", nargs=-1, required=True)
@CALIBRATION_OUT
@click.option("--name", default="verl", show_default=True, help="Scenario name.")
@click.option("--prompts", type=PROMPTS, default=None, help="Simulated B (default: logged B).")
@click.option(
    "--workers",
    type=WORKERS,
    default=None,
    help="Simulated engine replicas (default: logged).",
)
@click.option(
    "--fit-steps",
    type=click.IntRange(min=2),
    default=None,
    help="Fit each run's first K usable steps only (the rest stay held out for "
    "`compare verl-tb --calibration`).",
)
@scenario_default_options
@verl_options
def calibrate_verl_tb(
    run_dirs,
    out,
    name,
    prompts,
    workers,
    fit_steps,
    steps,
    tau,
    delta,
    **logged,
):
    """Fit lengths and cost to verl TensorBoard runs (RUN_DIR holds events.out.tfevents.*)."""
    try:
        cfg = verl_config(**logged)
        d = calibrate_verl(
            run_dir_args(run_dirs),
            cfg,
            name=name,
            prompts=prompts,
            workers=workers,
            defaults=scenario_defaults(steps, tau, delta),
            fit_steps=fit_steps,
        )
        write_json_atomic(d, out)
    except BAD_INPUT as exc:
        fail(exc)
    echo_assumptions(d)
    echo_phases(d)
    echo_tau(d)
    f = d["fit"]
    click.echo(
        f"wrote {out}: {f['steps_used']} steps; decode MAPE {f['decode']['mape']:.3f}, "
        f"learner MAPE {f['learner']['mape']:.3f}, length rms z {f['lengths']['rms_z']:.2f}"
    )
    click.echo(
        "no pass rates (verl's scalars hold none per prompt): `sim` on this scenario has no "
        "reward and no time to target; add them with `rolloutlab calibrate learning "
        f"--verl-tb {run_dirs[0]} --out {out}`"
    )


@calibrate.command("servegen")
@click.argument("folder", type=click.Path())
@CALIBRATION_OUT
@cost_from_option("Calibration file or bundled scenario whose cost and engine are reused.")
@click.option("--name", default="longcot", show_default=True, help="Scenario name.")
@click.option("--prompts", type=PROMPTS, required=True, help="Scenario default B.")
@scenario_default_options
@click.option(
    "--max-response-length",
    default=32768,
    show_default=True,
    type=POSITIVE_INT,
    help="Response cap (tokens, >= 1).",
)
def calibrate_servegen(
    folder, out, cost_from, name, prompts, steps, tau, delta, max_response_length
):
    """Long-reasoning scenario: ServeGen DeepSeek-R1 output lengths + a verl-fitted cost."""
    try:
        d = build_longcot(
            folder,
            cost_from,
            LongCotConfig(max_response_length=max_response_length),
            defaults={"prompts": prompts, **scenario_defaults(steps, tau, delta)},
            name=name,
        )
        write_json_atomic(d, out)
    except BAD_INPUT as exc:
        fail(exc)
    q = d["fit"]["pooled_output_tokens"]
    click.echo(f"wrote {out}: output tokens p50 {q['p50']}, p90 {q['p90']}, p99 {q['p99']}")


calibrate.add_command(vllm_grid)
calibrate.add_command(vllm_compare)
calibrate.add_command(vllm_steps)
calibrate.add_command(run_cost_cmd)
calibrate.add_command(calibrate_pass_rate)  # defined in commands/calibrate/learning.py
calibrate.add_command(calibrate_learning)
calibrate.add_command(calibrate_groups_cmd)  # defined in commands/calibrate/groups.py
calibrate.add_command(calibrate_turns_cmd)  # defined in commands/calibrate/turns.py
