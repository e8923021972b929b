"""The ``rolloutlab`` console script: wires each package's commands, holds no logic.

Subcommands are imported lazily, so ``rolloutlab sim`` never imports torch and
``rolloutlab real`` imports it only when run.
"""

from __future__ import annotations

import importlib

import click

# name -> "module:attribute" of a click command or group
COMMANDS = {
    "sim": "rolloutlab.analysis.sim_command:sim",
    "sweep": "rolloutlab.analysis.sweep_command:sweep",
    "stability": "rolloutlab.sim.stability_cli:stability",
    "calibrate": "rolloutlab.calibration.cli:calibrate",
    "validate": "rolloutlab.calibration.cli:validate",
    "real": "rolloutlab.real.cli:real",
    "compare": "rolloutlab.analysis.compare_cli:compare",
    "report": "rolloutlab.analysis.compare_cli:report",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup)
@click.version_option(package_name="rolloutlab")
def main() -> None:
    """rolloutlab: rollout grouping, batching and staleness for GRPO/DAPO training."""
