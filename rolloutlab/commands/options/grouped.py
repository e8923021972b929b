"""The options and input of the commands that read grouped per-sample files
(``calibrate groups``, ``compare groups``, ``compare replay``, ``compare run-spread``):
FILE... with its field names and tokenizer, the length models, tau, draws and the
subsample seed, and the one table-and-config output these commands write.

A file that cannot be read, or a length above ``--max-response-length``, is one line
naming the file, line and field (:class:`~rolloutlab.commands.options.common.BadInput`,
exit 2).
"""

from __future__ import annotations

from pathlib import Path

import click
import polars as pl

from rolloutlab.calibration.readers.grouped import (
    FIELD_OPTIONS,
    FieldNames,
    GroupedTrace,
    read_grouped,
)
from rolloutlab.commands.options.common import BadInput, claim
from rolloutlab.commands.options.types import POSITIVE_INT, PROMPTS, CommaList, finite
from rolloutlab.sim.models.within_law import LAWS
from rolloutlab.sim.scenario.provenance import write_config

LENGTH_MODELS = click.Choice(["lognormal", "empirical"])
WITHIN_LAWS = click.Choice([*LAWS, "auto"])

TAU_OPTION = click.option(
    "--tau",
    default="4",
    show_default=True,
    type=CommaList(finite(1.0, min_open=True)),
    help="Straggler thresholds on max/median length: distinct numbers > 1, comma-separated.",
)
DRAWS_OPTION = click.option(
    "--draws",
    default=200,
    show_default=True,
    type=POSITIVE_INT,
    help="Subsamples per step and G (>= 1).",
)
SUBSAMPLE_SEED_OPTION = click.option(
    "--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Subsample seed."
)
PROMPTS_OPTION = click.option(
    "--prompts", type=PROMPTS, default=None, help="B (default: as logged)."
)


def write_table(out, command: str, name: str, table: pl.DataFrame, config: dict) -> Path:
    """Claim the output folder ``out`` for ``command`` (``"compare replay"``), write
    ``table`` as ``name`` (CSV) and ``config.json`` (``{"command": command, **config}``
    with provenance); returns the folder."""
    out_dir = claim(out, command)
    table.write_csv(out_dir / name, float_precision=4)
    write_config(out_dir / "config.json", {"command": command, **config})
    return out_dir


def field_options(f):
    """The field-name and tokenizer options of :func:`calibration.readers.grouped.read_grouped`."""
    for name in reversed(FIELD_OPTIONS):
        f = click.option(
            f"--{name.replace('_', '-')}-field",
            name + "_field",
            default=None,
            help=f"Field holding the {name.replace('_', ' ')} (default: common spellings).",
        )(f)
    f = click.option(
        "--tokenizer",
        default=None,
        help="Hugging Face tokenizer (name or path, local files only) for text responses; "
        "without it, or when it is not found locally, lengths are characters.",
    )(f)
    return f


def reader_options(f):
    """FILE... and the options of :func:`calibration.readers.grouped.read_grouped` and the length
    models."""
    f = field_options(f)
    f = click.option(
        "--max-response-length",
        type=click.IntRange(min=1),
        default=None,
        help="Response cap in tokens (default: the largest cap in the data, else the "
        "longest length).",
    )(f)
    f = click.option(
        "--length-model",
        type=LENGTH_MODELS,
        default="lognormal",
        show_default=True,
        help="lognormal: hierarchical fit; empirical: resample whole observed groups.",
    )(f)
    f = click.option(
        "--within-law",
        type=WITHIN_LAWS,
        default="normal",
        show_default=True,
        help="Law of the within-group noise of log length (lognormal model): normal, "
        "gumbel (right-skewed), t (heavy tails, df fitted), or auto (least AIC).",
    )(f)
    f = click.option(
        "--fit-window",
        type=click.IntRange(min=2),
        default=None,
        help="Fit on the last W steps only (of the fit steps): the recent past of a "
        "nonstationary run (default: all).",
    )(f)
    f = click.option(
        "--step-window",
        type=click.IntRange(min=1),
        default=None,
        help="Empirical mode: at simulated step t draw from the W logged steps around t "
        "(replays the run's drift; default: every step pooled).",
    )(f)
    return click.argument("files", nargs=-1, required=True)(f)


def check_step_window(length_model: str, step_window: int | None) -> None:
    """``--step-window`` without ``--length-model empirical`` as :class:`BadInput`."""
    if step_window and length_model != "empirical":
        raise BadInput("--step-window: needs --length-model empirical")


def check_cap(trace: GroupedTrace | None, cap: int | None) -> None:
    """A length above ``--max-response-length`` as :class:`BadInput` (file, line, field)."""
    if trace is not None:
        try:
            trace.check_cap(cap)
        except ValueError as exc:
            raise BadInput(str(exc)) from None


def field_names(kw: dict) -> FieldNames:
    """The ``--<name>-field`` options (:func:`field_options`), popped from ``kw``."""
    return FieldNames(**{n: kw.pop(n + "_field") for n in FIELD_OPTIONS})


def read_files(files, tokenizer, kw) -> GroupedTrace:
    """One :class:`calibration.readers.grouped.GroupedTrace` of ``files``, the field options
    popped from ``kw``; a reader error as :class:`BadInput`."""
    names = field_names(kw)
    try:
        return read_grouped(list(files), names, tokenizer)
    except (ValueError, OSError) as exc:
        raise BadInput(str(exc)) from None
