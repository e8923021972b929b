"""``rolloutlab calibrate run-cost`` (wiring only; the fit is :mod:`analysis.idle.run_cost`)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from rolloutlab.calibration.scenarios.writer import (
    calibration_dict,
    source_entry,
    write_json_atomic,
)
from rolloutlab.commands.options.common import CALIBRATION_OUT, fail


@click.command("run-cost")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@CALIBRATION_OUT
@click.option(
    "--lengths-from",
    default="gsm8k",
    show_default=True,
    help="Calibration file or bundled scenario whose lengths, prompt tokens and defaults "
    "are reused (then e.g. `calibrate groups RUN_DIR --cost-from OUT` fits the lengths).",
)
@click.option("--name", default=None, help="Scenario name (default: run-cost-RUN).")
def run_cost_cmd(run_dir: Path, out, lengths_from, name):
    """Fit the cost model (decode, generation overhead, learner, weight sync) to a traced
    synchronous run's own steps, on its wall clock; write it as a calibration."""
    from rolloutlab.analysis.idle.run_cost import run_cost
    from rolloutlab.analysis.inputs.run_input import RunInputError, load_run
    from rolloutlab.sim.scenario.scenario import CalibrationError, load_scenario
    from rolloutlab.sim.trace.schema import TraceError

    try:
        run = load_run(run_dir)
        cost, engine, fit = run_cost(run)
        base = load_scenario(lengths_from).source
        d = calibration_dict(
            name=name or f"run-cost-{run_dir.name}",
            lengths=base["lengths"],
            prompt_tokens=int(run.rollouts["prompt_tokens"].median()),
            cost=cost,
            engine=engine,
            defaults={
                **base.get("defaults", {}),
                "prompts": int(run.config.get("config", run.config).get("prompts", 8)),
            },
            provenance={
                "source": "run-cost",
                "run": str(run_dir),
                "steps_file": source_entry(
                    next(
                        run_dir / f"steps.{s}"
                        for s in ("parquet", "jsonl")
                        if (run_dir / f"steps.{s}").exists()
                    )
                ),
                "lengths_from": str(lengths_from),
                "command": " ".join(shlex.quote(a) for a in ["rolloutlab", *sys.argv[1:]]),
            },
            fit={**fit, "not_measured": ["lengths (from --lengths-from)"]},
        )
        write_json_atomic(d, out)
    except (RunInputError, TraceError, CalibrationError, ValueError, OSError) as exc:
        fail(exc)
    click.echo(
        f"wrote {out}: a={cost['a_s']:.3e} b={cost['b_s']:.3e} c={cost['c_s']:.3e} s, "
        f"gen overhead {cost['gen_overhead_s']:.2f} s, learner {cost['learner_const_s']:.2f} s "
        f"+ {cost['learner_s_per_token']:.2e} s/token, sync {cost['sync_s']:.2f} s; "
        f"finish-time rel. RMSE {fit['decode']['rel_rmse']:.3f} over {fit['steps']} steps"
    )
    click.echo(fit["learner_why"])
