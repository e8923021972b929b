"""The GRPO loss's mechanism options, declared once for ``rolloutlab real sync``,
``real async`` and ``real stability``: ``--clip on|off``, ``--is-mode off|token|sequence``,
``--is-cap X``. They set :class:`real.rundir.config.LearnerConfig`'s ``clip`` (a bool:
``--clip on`` is True), ``is_mode`` and ``is_cap`` (:func:`real.policy.grpo.grpo_loss`);
click refuses any other value (exit 2, one line) before a run starts.
"""

from __future__ import annotations

from collections.abc import Callable

import click

from rolloutlab.commands.options.types import POSITIVE
from rolloutlab.real.rundir.config import IS_MODES, LearnerConfig


def _on_off(_ctx: click.Context, _param: click.Parameter, value: str) -> bool:
    """``on`` -> True, ``off`` -> False (click has already refused anything else)."""
    return value == "on"


LOSS_OPTIONS = (
    click.option(
        "--clip",
        default="on" if LearnerConfig.clip else "off",
        show_default=True,
        type=click.Choice(["on", "off"]),
        callback=_on_off,
        help="PPO ratio clip of the GRPO loss (real/policy/grpo.py; off: tinker's unclipped "
        "importance-sampling loss).",
    ),
    click.option(
        "--is-mode",
        default=LearnerConfig.is_mode,
        show_default=True,
        type=click.Choice(IS_MODES),
        help="Importance-sampling correction of the behaviour/learner gap (truncated at --is-cap).",
    ),
    click.option(
        "--is-cap",
        default=LearnerConfig.is_cap,
        show_default=True,
        type=POSITIVE,
        help="IS truncation C (finite, > 0).",
    ),
)
"""``--clip``, ``--is-mode``, ``--is-cap`` (module docstring); defaults: LearnerConfig's."""


def loss_options(f: Callable) -> Callable:
    """Add :data:`LOSS_OPTIONS` to a click command, in that order."""
    for option in reversed(LOSS_OPTIONS):
        f = option(f)
    return f
