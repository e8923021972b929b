"""The ``rolloutlab`` console script: the group of the commands in
:mod:`rolloutlab.commands` (a sub-package per command group), holding no logic.

Subcommands are imported lazily, and no command module imports torch at import time, so
``rolloutlab --help`` and ``rolloutlab sim`` never import torch and ``rolloutlab real``
imports it only when a run starts.
"""

from __future__ import annotations

import importlib

import click

# name -> "module:attribute" of a click command or group
COMMANDS = {
    "sim": "rolloutlab.commands.simulate.sim:sim",
    "scenario": "rolloutlab.commands.simulate.verl:scenario",
    "sweep": "rolloutlab.commands.grid.sweep:sweep",
    "stability": "rolloutlab.commands.grid.stability:stability",
    "calibrate": "rolloutlab.commands.calibrate.group:calibrate",
    "real": "rolloutlab.commands.real.group:real",
    "compare": "rolloutlab.commands.compare.group:compare",
    "report": "rolloutlab.commands.compare.group:report",
    "check-controller": "rolloutlab.commands.simulate.check_controller:check_controller",
    "advise": "rolloutlab.commands.grid.advise:advise",
    "tail-study": "rolloutlab.commands.simulate.tail_study:tail_study",
}

HELP = {
    "advise": "Search the settings for the fastest one that is safe (stragglers, collapse).",
    "calibrate": "Fit a simulator scenario (calibration JSON) to real logs.",
    "check-controller": "Check a group-size controller against the contract the runners rely on.",
    "compare": "Put the simulator's predictions next to real measurements (held-out steps or runs).",
    "real": "Real GRPO runs (torch or vLLM engine) driven by the simulator's controllers.",
    "report": "One self-contained HTML page per study directory, its answer first.",
    "scenario": "Write a simulator scenario from another tool's config (verl).",
    "sim": "Simulate GRPO under each controller and pipeline on the same prompt stream.",
    "stability": "Collapse phase diagram of asynchronous GRPO at staleness S and learning rate lr.",
    "sweep": "Run every controller on every grid point of the synchronous pipeline.",
    "tail-study": "Rank the tail fixes (SAGC, tail batching, partial rollouts, speculative decoding) by time to target.",
}
"""name -> the first line of its docstring, so ``rolloutlab --help`` imports no command
module (importing them all took about 2.4 s; a test checks these lines against the
docstrings). A command missing here is imported for its help."""


DEPRECATED = {"validate": "compare"}
"""old command name -> the command that replaced it: still accepted (a one-line note on
stderr), not listed by ``--help``."""


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use (``--help`` of the group
    uses :data:`HELP` and imports none)."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of ``--help``, from :data:`HELP` where it has the name."""
        limit = formatter.width - 6 - max(len(n) for n in COMMANDS)
        rows = []
        for name in self.list_commands(ctx):
            if name in HELP:
                text = click.Command(name, help=HELP[name]).get_short_help_str(limit)
            else:
                cmd = self.get_command(ctx, name)
                text = cmd.get_short_help_str(limit) if cmd is not None else ""
            rows.append((name, text))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command name, sorted (none imported)."""
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        """The click command ``name``, imported on first use; None for an unknown name. A
        :data:`DEPRECATED` name gives its replacement, with a note on stderr."""
        if name in DEPRECATED:
            new = DEPRECATED[name]
            click.echo(
                f"note: 'rolloutlab {name}' is deprecated, use 'rolloutlab {new}' "
                "(same subcommands and options)",
                err=True,
            )
            name = new
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup)
@click.version_option(package_name="rolloutlab")
def main() -> None:
    """rolloutlab: rollout grouping, batching and staleness for GRPO/DAPO training."""
