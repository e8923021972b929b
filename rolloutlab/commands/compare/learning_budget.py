"""Click command ``rolloutlab compare learning-budget`` (wiring only; the study is
:mod:`analysis.learning.budget`, docs/learning.md §6)."""

from __future__ import annotations

import dataclasses

import click

from rolloutlab.commands.options.common import BadInput, claimed, out_option, renamed_option
from rolloutlab.commands.options.terminal import echo_table
from rolloutlab.commands.options.types import POSITIVE_INT, finite


def _ints(text: str, name: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise BadInput(f"{name}: expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise BadInput(f"{name}: expected integers >= 1, got {text!r}")
    return values


@click.command("learning-budget")
@click.option("--scenario", default="longcot", show_default=True,
              help="Bundled scenario or calibration JSON: its pass_rate (beta) and learning blocks.")  # fmt: skip
@click.option("--b-noise", "b_noise", type=finite(0.0), default=None,
              help="Noise scale (informative samples) replacing the block's (default: the block's).")  # fmt: skip
@click.option("--budgets", default="1024,4096,16384,65536", show_default=True,
              help="Rollout budgets, comma-separated.")  # fmt: skip
@click.option("--group-size", "group_sizes", default="2,4,8,16,32", show_default=True,
              help="G values, comma-separated.")  # fmt: skip
@renamed_option("--group-sizes", "--group-size", "group_sizes")
@click.option("--prompts", default=16, show_default=True, type=POSITIVE_INT, help="B per step.")
@click.option("--draws", default=64, show_default=True, type=POSITIVE_INT, help="Runs per cell.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seed.")
@out_option("Output directory (budget_study.csv, budget_summary.csv).")
def learning_budget(scenario, b_noise, budgets, group_sizes, prompts, draws, seed, out_dir):
    """Run the learning law over rollout budgets: per budget the best G and G = 2's share
    of G = 16's reward at equal rollouts (docs/learning.md §6)."""
    from rolloutlab.analysis.learning.budget import budget_study, budget_summary
    from rolloutlab.sim.models.passrate import BetaPassRate
    from rolloutlab.sim.scenario.provenance import write_config
    from rolloutlab.sim.scenario.scenario import CalibrationError, load_scenario

    try:
        sc = load_scenario(scenario)
        if not isinstance(sc.pass_rate, BetaPassRate) or sc.learning is None:
            raise BadInput(f"{scenario}: needs a beta pass_rate block and a learning block")
        a, b = sc.pass_rate.a, sc.pass_rate.b
        params = sc.learning
        if b_noise is not None:
            params = dataclasses.replace(params, b_noise=b_noise)
        budget_list, g_list = _ints(budgets, "--budgets"), _ints(group_sizes, "--group-size")
    except (CalibrationError, ValueError) as exc:
        raise BadInput(str(exc)) from None
    with claimed(out_dir, "compare-learning-budget"):
        try:
            table = budget_study(params, (a, b), budget_list, g_list, prompts, draws, seed)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
        summary = budget_summary(table)
        table.write_csv(out_dir / "budget_study.csv")
        summary.write_csv(out_dir / "budget_summary.csv")
        config = {"kind": "compare-learning-budget", "scenario": scenario, "b_noise": b_noise,
                  "budgets": budget_list, "group_sizes": g_list, "prompts": prompts,
                  "draws": draws, "seed": seed}  # fmt: skip
        write_config(out_dir / "config.json", config)
    echo_table(summary)
    click.echo(f"-> {out_dir}")
