"""The ``rolloutlab`` console script: the group of the commands in
:mod:`rolloutlab.commands` (one module per command group), holding no logic.

Subcommands are imported lazily, and no command module imports torch at import time, so
``rolloutlab --help`` and ``rolloutlab sim`` never import torch and ``rolloutlab real``
imports it only when a run starts.
"""

from __future__ import annotations

import importlib

import click

# name -> "module:attribute" of a click command or group
COMMANDS = {
    "sim": "rolloutlab.commands.sim:sim",
    "sweep": "rolloutlab.commands.sweep:sweep",
    "stability": "rolloutlab.commands.stability:stability",
    "calibrate": "rolloutlab.commands.calibrate:calibrate",
    "validate": "rolloutlab.commands.validate:validate",
    "real": "rolloutlab.commands.real:real",
    "compare": "rolloutlab.commands.compare:compare",
    "report": "rolloutlab.commands.compare:report",
    "check-controller": "rolloutlab.commands.check_controller:check_controller",
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
