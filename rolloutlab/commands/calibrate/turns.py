"""``rolloutlab calibrate turns``: fit a scenario's multi_turn block to a turns table."""

from __future__ import annotations

import click

from rolloutlab.calibration.fits.turns_fit import calibrate_turns
from rolloutlab.calibration.scenarios.writer import write_json_atomic
from rolloutlab.commands.options.common import CALIBRATION_OUT, fail
from rolloutlab.sim.scenario.scenario import CalibrationError


@click.command("turns")
@click.argument("turns_file", type=click.Path())
@CALIBRATION_OUT
@click.option(
    "--base",
    default="gsm8k",
    show_default=True,
    help="Scenario (file or bundled name) whose lengths, cost and engine are kept.",
)
def calibrate_turns_cmd(turns_file, out, base):
    """Fit turns, tool latency, timeout, sandboxes to TURNS_FILE (turns.parquet/.jsonl)."""
    try:
        d = calibrate_turns(turns_file, base)
        write_json_atomic(d, out)
    except (CalibrationError, ValueError, OSError) as exc:
        fail(exc)
    m, f = d["multi_turn"], d["fit"]["multi_turn"]
    lat = m["tool_latency"]
    click.echo(
        f"wrote {out}: {f['tool_calls']} tool calls of {f['rollouts']} rollouts; turns "
        f"{m['turns']}; tool latency {lat['min_s']:.3g} s + lognormal(median "
        f"{lat['scale_s']:.3g} s, sigma {lat['sigma']:.3g}); timeout {m['timeout_s']}; "
        f"sandboxes {m['sandboxes']}"
    )
