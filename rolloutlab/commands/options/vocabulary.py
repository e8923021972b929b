"""One word per concept on the command line: the option every command spells a concept
with, and the spellings retired in its favour.

A retired spelling still runs where a command had it (hidden from ``--help``, one
``note: OLD is deprecated, use NEW`` line on stderr: :func:`~rolloutlab.commands.options.common.renamed_option`);
no command lists it. :func:`retired_in` walks the click tree and names every listed
option that is a retired spelling, so a new command cannot bring a synonym back.
The table is printed in ``docs/cli.md`` (a test keeps the two equal).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import click


@dataclass(frozen=True)
class Term:
    """One concept of the command line."""

    concept: str
    """What the option sets, in the field's words (DESIGN.md's vocabulary)."""
    options: tuple[str, ...]
    """Its spelling(s): one concept, one word; a second entry is a different role of the
    same word (``--seed`` one seed, ``--seeds N`` seeds 0..N-1)."""
    retired: tuple[str, ...] = ()
    """Spellings no command may list. ``--split@compare`` retires ``--split`` only under
    ``rolloutlab compare ...`` (a word that stays, elsewhere, the spelling of another
    concept)."""


VOCABULARY: tuple[Term, ...] = (
    Term("group size G (completions per prompt)", ("--group-size",), ("--G", "--group-sizes")),
    Term("prompt batch B (prompts per learner step)", ("--prompts",), ("--batch", "--batch-size")),
    Term(
        "S: sync interval (stability) or staleness bound (bounded:S)",
        ("--S",),
        ("--staleness", "--max-staleness"),
    ),
    Term("learning rate eta", ("--lr",), ("--eta", "--learning-rate")),
    Term("seed(s) of the run", ("--seed", "--seeds"), ("--seed-count", "--n-seeds")),
    Term("learner steps T", ("--steps",), ("--T", "--n-steps", "--num-steps")),
    Term("group-size controller spec(s)", ("--controller",), ("--controllers",)),
    Term(
        "pipeline (sync, one-step-off, bounded:S, interval:S)",
        ("--pipeline",),
        ("--pipelines", "--mode"),
    ),  # fmt: skip
    Term(
        "rollout engine replicas (workers)",
        ("--workers", "--logged-workers"),
        ("--gen-workers", "--n-workers", "--replicas"),
    ),  # fmt: skip
    Term(
        "response cap (tokens)",
        ("--max-response-length",),
        ("--max-response-tokens", "--response-length", "--max-tokens"),
    ),  # fmt: skip
    Term(
        "sequences decoded at once per engine (vLLM max_num_seqs)",
        ("--max-num-seqs",),
        ("--capacity",),
    ),  # fmt: skip
    Term("speculative decoding", ("--speculative",), ("--spec",)),
    Term("GPU split R:T (rollout : trainer)", ("--split",), ("--splits",)),
    Term("rollout-GPU budget", ("--rollout-gpus",), ("--accelerators",)),
    Term("which runs are held out (seed or lr)", ("--held-out-by",), ("--split@compare",)),
    Term("the one lr or S value held out", ("--held-out-value",), ()),
    Term("held-out run file(s)", ("--held-out",), ()),
    Term("steps forecast after K", ("--forecast-steps",), ("--horizon@compare",)),
    Term("grid points (runs) at a time", ("--max-parallel",), ("--jobs",)),
    Term("search trials asked at a time", ("--parallel-trials",), ()),
    Term("simulated draws", ("--draws",), ("--replicates",)),
    Term("calibration file", ("--calibration",), ("--calib",)),
    Term("training reward a run must reach (simulated runs)", ("--target-reward",), ()),
    Term("held-out accuracy a real run must reach", ("--target-accuracy",), ()),
    Term("output folder or file", ("--out",), ("--output", "--out-dir", "--output-dir")),
)
"""Every concept whose spelling was once in doubt (``docs/cli.md``'s table)."""


def retired_spellings() -> dict[str, tuple[str, str]]:
    """``{retired spelling: (canonical spelling, command prefix)}``; the prefix is ``""``
    for a spelling retired everywhere."""
    out = {}
    for term in VOCABULARY:
        for spelling in term.retired:
            option, _, prefix = spelling.partition("@")
            out[option + ("@" + prefix if prefix else "")] = (term.options[0], prefix)
    return out


def listed_options(root: click.Command, path: str = "") -> Iterator[tuple[str, str]]:
    """``(command path, option spelling)`` for every option ``--help`` lists, over every
    command and subcommand under ``root`` (hidden options and deprecated commands left out)."""
    ctx = click.Context(root)
    if isinstance(root, click.Group):
        for name in root.list_commands(ctx):
            sub = root.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from listed_options(sub, f"{path} {name}".strip())
        return
    for param in root.params:
        if isinstance(param, click.Option) and not param.hidden:
            for spelling in (*param.opts, *param.secondary_opts):
                yield path, spelling


def retired_in(root: click.Command) -> list[str]:
    """One line per listed option of ``root``'s tree that is a retired spelling:
    ``"rolloutlab sim: --controllers (use --controller)"``. Empty when the tree reads as
    one vocabulary."""
    retired = retired_spellings()
    found = []
    for path, spelling in listed_options(root):
        for key, (canonical, prefix) in retired.items():
            if key.split("@")[0] == spelling and (path + " ").startswith(prefix):
                found.append(f"rolloutlab {path}: {spelling} (use {canonical})")
    return found
