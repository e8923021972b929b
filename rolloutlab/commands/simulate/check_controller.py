"""``rolloutlab check-controller SPEC``: the controller contract of
:mod:`rolloutlab.testing` from the command line."""

from __future__ import annotations

import click

from rolloutlab.commands.options.common import RunFailed, fail


@click.command("check-controller")
@click.argument("spec")
@click.option("--seed", default=0, show_default=True, type=int, help="Controller seed.")
@click.option(
    "--examples",
    default=25,
    show_default=True,
    type=click.IntRange(min=1),
    help="Hypothesis examples per property.",
)
@click.option(
    "--max-steps",
    default=24,
    show_default=True,
    type=click.IntRange(min=1),
    help="Longest observation stream.",
)
@click.option(
    "--straggler-steps",
    default=2000,
    show_default=True,
    type=click.IntRange(min=2),
    help="Steps of the stationary straggler-rate run.",
)
@click.option(
    "--budget-ms",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Fail when the 99th percentile of propose + observe per step exceeds it (ms).",
)
@click.option(
    "--only",
    default=None,
    metavar="KEY[,KEY...]",
    help="Check only these properties: candidates, extremes, restore, seed, straggler, timing.",
)
def check_controller(spec, seed, examples, max_steps, straggler_steps, budget_ms, only):
    """Check a group-size controller against the contract the runners rely on.

    Checks controller SPEC (static:G, sagc[:k=v], lagc[:k=v], file.py:Class[:k=v],
    module:Class[:k=v] or an entry point) against the contract the simulator and the
    real runners rely on; prints one line per property and, for a failed one, the
    smallest failing example. Exit 0: all passed; 1: a property failed; 2: bad SPEC.
    Writes nothing."""
    from rolloutlab.sim.control.plugins import check_candidates
    from rolloutlab.sim.control.spec import parse_controller
    from rolloutlab.testing.check import PROPERTIES, check_controller

    keys = None if only is None else [k.strip() for k in only.split(",") if k.strip()]
    try:
        if keys is not None and (not keys or set(keys) - set(PROPERTIES)):
            raise ValueError(f"--only: expected keys among {', '.join(PROPERTIES)}, got {only!r}")
        ctl = parse_controller(spec, seed=seed)  # a spec that cannot build: bad input
        check_candidates(ctl, f"controller spec {spec!r}")  # the kit tests propose() on them
    except ValueError as exc:
        fail(exc)
    report = check_controller(
        spec,
        seed=seed,
        max_examples=examples,
        max_steps=max_steps,
        straggler_steps=straggler_steps,
        budget_ms=budget_ms,
        raise_on_failure=False,
        only=keys,
    )
    click.echo(str(report))
    if not report.ok:
        raise RunFailed(f"{spec}: {', '.join(r.key for r in report.failed)} failed")
