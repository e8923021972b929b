"""The options every grid command shares (``--executor --ray-address --ray-runtime-env
--max-parallel --retries --resume``) and the driver that runs a grid through an executor
into its results file, with a progress bar on a terminal.

A command decorates itself with :func:`grid_options`, builds its executor with
:func:`executor_from` and checks it (and, with ``--resume``, the folder) before claiming
its output folder, then calls :func:`run_points`. Documented in docs/grids.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
import polars as pl

from rolloutlab.commands.grid.executor import Executor, ExecutorError, LocalExecutor, RayExecutor
from rolloutlab.commands.grid.store import GridResumeError, GridStore
from rolloutlab.commands.options.common import RunFailed, fail
from rolloutlab.real.rundir.extras import MissingExtra
from rolloutlab.sim.scenario.provenance import write_config
from rolloutlab.sim.trace.progress import progress_bar

GRID_KEYS = ("executor", "ray_address", "ray_runtime_env", "max_parallel", "retries", "resume")
"""The keyword arguments :func:`grid_options` adds to a command."""


def grid_options(command):
    """Decorate a click command with the grid options (passed as :data:`GRID_KEYS`)."""
    command = click.option(
        "--resume",
        is_flag=True,
        help="Run only the points missing from --out's grid.jsonl (same options as the first run).",
    )(command)
    return executor_options(command)


def executor_options(command):
    """Decorate a click command with the executor options (:data:`GRID_KEYS` but
    ``resume``)."""
    options = [
        click.option(
            "--executor",
            type=click.Choice(["local", "ray"]),
            default="local",
            show_default=True,
            help="Where grid points run: this machine, or Ray tasks (needs the ray extra).",
        ),
        click.option(
            "--ray-address",
            metavar="ADDR",
            default=None,
            help="Ray cluster to join (auto, HOST:PORT, ray://HOST:PORT); default: start a local Ray runtime.",
        ),
        click.option(
            "--ray-runtime-env",
            metavar="JSON",
            default=None,
            help='Ray runtime_env as JSON, e.g. \'{"pip": ["rolloutlab[ray]"]}\'.',
        ),
        click.option(
            "--max-parallel",
            type=click.IntRange(min=1),
            default=None,
            help="Grid points at a time [local default: 1, in this process; ray: the cluster's CPUs].",
        ),
        click.option(
            "--retries",
            type=click.IntRange(min=0),
            default=0,
            show_default=True,
            help="Tries after a grid point raises; then it is recorded as failed (status, error columns).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def executor_from(opts: dict[str, Any], default_parallel: int | None = None) -> Executor:
    """The executor the grid options in ``opts`` ask for (``default_parallel``: the local
    executor's parallelism when ``--max-parallel`` is not given). Imports Ray only for
    ``--executor ray``. Raises :class:`click.BadParameter` (exit 2) for a ray option
    without ``--executor ray`` or a runtime env that is not a JSON object."""
    if opts["executor"] != "ray":
        for key in ("ray_address", "ray_runtime_env"):
            if opts[key] is not None:
                name = "--" + key.replace("_", "-")
                raise click.BadParameter("needs --executor ray", param_hint=name)
        return LocalExecutor(opts["max_parallel"] or default_parallel, opts["retries"])
    env = None
    if opts["ray_runtime_env"] is not None:
        try:
            env = json.loads(opts["ray_runtime_env"])
        except ValueError as exc:
            raise click.BadParameter(f"not JSON ({exc})", param_hint="--ray-runtime-env") from None
        if not isinstance(env, dict):
            raise click.BadParameter("expected a JSON object", param_hint="--ray-runtime-env")
    return RayExecutor(opts["ray_address"], opts["max_parallel"], opts["retries"], env)


def prepare_grid(
    opts: dict[str, Any],
    out_dir: str | Path,
    command: str,
    spec: dict,
    points: Sequence[dict],
    default_parallel: int | None = None,
    earlier_specs: Sequence[dict] = (),
) -> tuple[Executor, GridStore]:
    """Everything that can refuse a grid, before its output folder is claimed: the
    executor (Ray importable, cluster reachable) and, with ``--resume``, the folder's grid
    file (same spec); without it, a folder holding finished points of any grid
    (:meth:`GridStore.check_fresh`: "pass --resume"). Raises BadInput (one line, exit 2,
    nothing written). ``earlier_specs``: :class:`GridStore`'s."""
    executor = executor_from(opts, default_parallel)
    store = GridStore(out_dir, command, spec, points, earlier_specs)
    try:
        if opts["resume"]:
            store.check_resume()
        else:
            store.check_fresh()
        executor.check()
    except (ExecutorError, GridResumeError, MissingExtra) as exc:
        fail(exc)
    return executor, store


def run_points(
    executor: Executor,
    store: GridStore,
    fn: Callable[[dict], Any],
    resume: bool,
    desc: str,
) -> None:
    """Run ``fn`` on every point of ``store`` not yet recorded, recording each outcome
    as it finishes. A progress bar (points done / total, failures, ETA) is shown on a
    terminal only (tqdm disables itself when stderr is not a tty). Closes the executor."""
    store.open(resume)
    todo = [(i, p) for i, p in enumerate(store.points) if i not in store.done]
    failed = sum(r["status"] != "ok" for r in store.done.values())
    bar = progress_bar(total=len(store.points), initial=len(store.done), desc=desc, unit="point")
    bar.set_postfix(failed=failed)

    def on_outcome(outcome) -> None:
        nonlocal failed
        store.record(outcome)
        failed += outcome.status != "ok"
        bar.set_postfix(failed=failed, refresh=False)
        bar.update(1)

    try:
        executor.run(fn, todo, on_outcome)
    finally:
        bar.close()
        executor.close()


def describe_executor(opts: dict[str, Any]) -> dict[str, Any]:
    """The grid options for ``config.json`` (not part of the grid's spec hash: a grid
    resumed on another executor is the same grid)."""
    return {k: opts[k] for k in GRID_KEYS if k in opts}


def start_grid(out_dir: str | Path, config: dict[str, Any]) -> Path:
    """Write the grid's ``config.json`` as soon as its folder is claimed (the final one
    replaces it), so the folder of a killed grid is recognised as this command's by
    :func:`rolloutlab.commands.options.common.claim_out_dir` and can be resumed."""
    out = Path(out_dir)
    write_config(out / "config.json", config)
    return out


def finish_grid(store: GridStore) -> pl.DataFrame:
    """The grid's table (:meth:`GridStore.table`) after :func:`run_points`; says how many
    points failed (their ``status``/``error`` columns). Raises
    :class:`~rolloutlab.commands.options.common.RunFailed` (exit 1) when every point failed, with
    the first error (the results file keeps them all)."""
    table = store.table()
    failed = [r for r in store.done.values() if r["status"] != "ok"]
    if failed and len(failed) == len(store.done):
        raise RunFailed(
            f"every grid point failed ({len(failed)}); first: {failed[0]['error']} "
            f"(all in {store.path})"
        )
    if failed:
        click.echo(
            f"{len(failed)} of {len(store.points)} grid points failed after retries: "
            "rows with status=failed and their error",
            err=True,
        )
    return table
