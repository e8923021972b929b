"""The collapse detector's options, declared once for ``rolloutlab real async``
and ``real stability``: ``--kl-max``, ``--detector-patience``, ``--release``,
``--entropy-frac``. They set :class:`real.runners.collapse.CollapseConfig`'s ``kl_max``,
``kl_patience``, ``release`` and ``entropy_frac`` (:func:`detector_config`); click refuses a
NaN, negative or out-of-range value (exit 2, one line) before a run starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from rolloutlab.commands.options.types import POSITIVE, POSITIVE_INT, finite
from rolloutlab.real.runners.collapse import CollapseConfig

DETECTOR_FIELDS = {
    "kl_max": "kl_max",
    "detector_patience": "kl_patience",
    "release": "release",
    "entropy_frac": "entropy_frac",
}
"""Click parameter name -> :class:`CollapseConfig` field."""

DETECTOR_OPTIONS = (
    click.option(
        "--kl-max",
        default=CollapseConfig.kl_max,
        show_default=True,
        type=POSITIVE,
        help="Collapse detector: KL-to-warm-start bound (nats/token, finite > 0).",
    ),
    click.option(
        "--detector-patience",
        default=CollapseConfig.kl_patience,
        show_default=True,
        type=POSITIVE_INT,
        help="Collapse detector: steps an excursion of KL / ratio / entropy must last "
        "(1: at once).",
    ),
    click.option(
        "--release",
        default=CollapseConfig.release,
        show_default=True,
        type=finite(0.0, 1.0, min_open=True),
        help="Collapse detector hysteresis: an excursion ends below this fraction of its "
        "bound (in (0, 1]; 1: none).",
    ),
    click.option(
        "--entropy-frac",
        default=CollapseConfig.entropy_frac,
        show_default=True,
        type=finite(0.0, 1.0, max_open=True),
        help="Collapse detector: entropy criterion, the token-mean policy entropy below this "
        f"fraction of its mean over the first {CollapseConfig.patience} steps (in [0, 1); "
        "0: off).",
    ),
)
"""``--kl-max``, ``--detector-patience``, ``--release``, ``--entropy-frac`` (module
docstring); defaults: CollapseConfig's."""


def detector_options(f: Callable) -> Callable:
    """Add :data:`DETECTOR_OPTIONS` to a click command, in that order."""
    for option in reversed(DETECTOR_OPTIONS):
        f = option(f)
    return f


def detector_config(opts: dict[str, Any]) -> CollapseConfig:
    """The :class:`CollapseConfig` of the parsed options ``opts`` (keys of
    :data:`DETECTOR_FIELDS`; other keys ignored). Raises ValueError on a value CollapseConfig
    refuses."""
    return CollapseConfig(**{field: opts[name] for name, field in DETECTOR_FIELDS.items()})
