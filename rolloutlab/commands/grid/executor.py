"""Executors for grid work: every grid point is one task, run in this process, in local
worker processes, or as a Ray task on a local or existing Ray cluster.

An executor runs ``fn(point)`` for each ``(index, point)`` it is given and reports an
:class:`Outcome` per point as soon as that point finishes (in completion order, not grid
order), so the caller can record it at once (:mod:`rolloutlab.commands.grid.store`). A
point whose ``fn`` raises is retried ``retries`` more times (:func:`attempt`, the same
code in every executor), then reported ``failed`` with its last error: one bad point never
fails the grid. Results do not depend on the executor: ``fn`` gets the same point and the
simulator is seeded per point.

Ray is imported only by :class:`RayExecutor` (the ``ray`` extra, ``pip install
'rolloutlab[ray]'``). Its tasks follow Ray's documented core API (``ray.init``,
``ray.remote``, ``ray.put``, ``ray.wait``, ``ray.get``; docs.ray.io, "Ray Core").
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import importlib
import multiprocessing
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rolloutlab.real.rundir.extras import MissingExtra


class ExecutorError(ValueError):
    """The executor cannot run: a Ray address that cannot be reached or that Ray refuses.
    The message is one line naming the option; the CLI exits 2 (nothing written)."""


@dataclass(frozen=True)
class Outcome:
    """What one grid point gave: ``status`` ``"ok"`` (``value`` is ``fn``'s return) or
    ``"failed"`` (``value`` None, ``error`` the last ``"Type: message"``), after
    ``attempts`` tries (1 + retries at most)."""

    index: int
    status: str
    value: Any
    error: str | None
    attempts: int


def attempt(fn: Callable[[Any], Any], point: Any, retries: int) -> tuple[str, Any, Any, int]:
    """Call ``fn(point)`` up to ``1 + retries`` times until it returns; returns
    ``(status, value, error, attempts)`` as in :class:`Outcome`. Catches ``Exception``
    (not KeyboardInterrupt/SystemExit, so a stopped driver stops)."""
    error = None
    for k in range(retries + 1):
        try:
            return "ok", fn(point), None, k + 1
        except Exception as exc:  # a failing point is recorded, not raised
            error = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return "failed", None, error, retries + 1


Items = Sequence[tuple[int, Any]]
OnOutcome = Callable[[Outcome], None]


class LocalExecutor:
    """Points in this process (``max_parallel`` None or 1, the default: exactly the
    loop the commands ran before executors existed) or in ``max_parallel`` spawned worker
    processes (``fn`` and the points must then pickle)."""

    name = "local"

    def __init__(self, max_parallel: int | None = None, retries: int = 0):
        if (max_parallel is not None and max_parallel < 1) or retries < 0:
            raise ExecutorError(
                f"--max-parallel must be >= 1 and --retries >= 0, got {max_parallel}, {retries}"
            )
        self.max_parallel, self.retries = max_parallel, retries

    def check(self) -> None:
        """Nothing to check: the local executor always runs."""

    def run(self, fn: Callable[[Any], Any], items: Items, on_outcome: OnOutcome) -> None:
        """Run ``fn`` on every ``(index, point)``; ``on_outcome`` per finished point."""
        if not self.max_parallel or self.max_parallel == 1:
            for i, point in items:
                on_outcome(Outcome(i, *attempt(fn, point, self.retries)))
            return
        ctx = multiprocessing.get_context("spawn")
        with cf.ProcessPoolExecutor(self.max_parallel, mp_context=ctx) as pool:
            futures = {pool.submit(attempt, fn, p, self.retries): i for i, p in items}
            for fut in cf.as_completed(futures):
                try:
                    on_outcome(Outcome(futures[fut], *fut.result()))
                except cf.process.BrokenProcessPool as exc:  # a worker died (killed, OOM)
                    on_outcome(Outcome(futures[fut], "failed", None, f"worker died: {exc}", 1))

    def close(self) -> None:
        """Nothing to release."""


def import_ray() -> Any:
    """The ``ray`` module; raises :class:`~rolloutlab.real.rundir.extras.MissingExtra` (the
    ``ray`` extra) when it is not installed."""
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise MissingExtra("--executor ray", "Ray", "ray") from None


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Open and close a TCP connection to ``host:port`` of a Ray address
    (``host:port`` or ``ray://host:port``; ``auto`` and other forms are left to Ray), so an
    unreachable cluster is one line within ``timeout_s`` rather than Ray's long retry loop.
    Raises :class:`ExecutorError` naming the address."""
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ExecutorError(
            f"--ray-address {address}: cannot reach a Ray cluster ({reason})"
        ) from None


class RayExecutor:
    """One Ray task per point (``num_cpus=1`` each), at most ``max_parallel`` in flight
    (default: the cluster's CPUs). ``address`` None (and no ``RAY_ADDRESS`` in the
    environment, Ray's own variable) starts a local Ray runtime with
    ``num_cpus`` CPUs (default: ``max_parallel``, else all), else connects to that cluster
    (``ray.init(address=...)``, e.g. ``auto`` or ``HOST:6379``) with ``runtime_env``.
    A Ray runtime already initialised in this process (tests, notebooks) is reused and
    left running. Ray's own ``max_retries`` covers a worker process that dies; an
    exception inside ``fn`` is retried by :func:`attempt`."""

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        max_parallel: int | None = None,
        retries: int = 0,
        runtime_env: dict | None = None,
        num_cpus: int | None = None,
    ):
        LocalExecutor(max_parallel, retries)  # same option checks
        address = address or os.environ.get("RAY_ADDRESS") or None  # Ray's own convention
        self.address, self.max_parallel, self.retries = address, max_parallel, retries
        self.runtime_env, self.num_cpus = runtime_env, num_cpus or max_parallel
        self.ray: Any = None
        self.started = False

    def check(self) -> None:
        """Import Ray and connect (or start the local runtime). Raises
        :class:`~rolloutlab.real.rundir.extras.MissingExtra` when Ray is not installed,
        :class:`ExecutorError` when the address is unreachable or refused by Ray."""
        if self.ray is not None:
            return
        ray = import_ray()
        if self.address is not None:
            check_reachable(self.address)
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"log_to_driver": False, "include_dashboard": False}
            if self.runtime_env:
                kwargs["runtime_env"] = self.runtime_env
            if self.address is None:
                kwargs["num_cpus"] = self.num_cpus
            else:
                kwargs["address"] = self.address
            try:
                ray.init(**kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = f"--ray-address {self.address}" if self.address else "--executor ray"
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise ExecutorError(f"{where}: cannot start or join Ray ({first})") from None
            self.started = True
        self.ray = ray

    def run(self, fn: Callable[[Any], Any], items: Items, on_outcome: OnOutcome) -> None:
        """Submit every point as a task (a window of ``max_parallel``), report each as it
        finishes (``ray.wait``). A task lost to a dead worker after Ray's retries is
        reported ``failed``."""
        self.check()
        ray = self.ray
        task = ray.remote(num_cpus=1, max_retries=self.retries)(attempt)
        fn_ref = ray.put(fn)  # the scenario etc. travel once, not once per point
        window = self.max_parallel or max(1, int(ray.cluster_resources().get("CPU", 1)))
        queue = collections.deque(items)
        pending: dict[Any, int] = {}
        while queue or pending:
            while queue and len(pending) < window:
                i, point = queue.popleft()
                pending[task.remote(fn_ref, point, self.retries)] = i
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                i = pending.pop(ref)
                try:
                    outcome = Outcome(i, *ray.get(ref))
                except ray.exceptions.RayError as exc:
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                    outcome = Outcome(i, "failed", None, f"{type(exc).__name__}: {first}", 1)
                on_outcome(outcome)

    def close(self) -> None:
        """Shut down the Ray runtime if this executor started it."""
        if self.started and self.ray is not None:
            self.ray.shutdown()
            self.started = False


Executor = LocalExecutor | RayExecutor
