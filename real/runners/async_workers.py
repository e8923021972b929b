"""The generator process of an asynchronous run and the channels between it and the learner.

Two processes (``torch.multiprocessing``, spawn), one torch thread each:

- **learner** (the caller): owns the controller and the optimiser; dispatches prompt
  batches (a command queue) and pushes weights;
- **generator** (:func:`generator_main`): takes a batch command, installs the newest
  weights if their version changed, generates the batch with the run's engine (a
  :class:`~real.engines.torch_engine.TorchEngine`, or a vLLM engine built in this process)
  and puts the results on a **bounded** result queue (``lead + 1`` batches: at most that
  many are ever outstanding).

Weights travel through :class:`SharedWeights`: one tensor per parameter in shared memory
plus a version counter, under a lock (a push copies ``state_dict`` in, a pull copies it
out; neither sees a torn half-update). Either process notices the other's death: the
learner polls ``is_alive`` while it waits (:meth:`GeneratorHandle.receive` raises
:class:`GeneratorDied`), the generator polls its parent and exits.
"""

from __future__ import annotations

import os
import queue
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.multiprocessing as mp
from rolloutlab.real.engines.interface import RolloutRequest, RolloutResult
from rolloutlab.real.engines.sampling import SamplingParams
from rolloutlab.real.engines.torch_engine import TorchEngine
from rolloutlab.real.policy.model import LlamaConfig, build_model

_CTX = mp.get_context("spawn")


class GeneratorDied(RuntimeError):
    """The generator process exited or failed; the message says how and which batch was awaited."""


class SharedWeights:
    """Policy weights in shared memory with a version counter (created by the learner).

    Life cycle: built from the learner's ``state_dict`` (version ``version``), handed to
    the generator process at spawn; :meth:`push` (learner) and :meth:`pull` (generator).
    """

    def __init__(self, state_dict: Mapping[str, torch.Tensor], version: int):
        self.tensors = {k: v.detach().clone().share_memory_() for k, v in state_dict.items()}
        self._version = _CTX.Value("q", version, lock=False)
        self._lock = _CTX.Lock()

    @property
    def version(self) -> int:
        """Version of the weights now in shared memory."""
        return int(self._version.value)

    def push(self, state_dict: Mapping[str, torch.Tensor], version: int) -> float:
        """Copy ``state_dict`` in as ``version``; returns the seconds it took (lock wait included)."""
        t0 = time.perf_counter()
        with self._lock, torch.no_grad():
            for k, t in self.tensors.items():
                t.copy_(state_dict[k])
            self._version.value = version
        return time.perf_counter() - t0

    def pull(self, install: Callable[[Mapping[str, torch.Tensor], int], None], have: int) -> int:
        """Call ``install(tensors, version)`` under the lock if the version differs from
        ``have``; returns the version now installed."""
        if self.version == have:
            return have
        with self._lock:
            v = self.version
            install(self.tensors, v)
        return v


@dataclass(frozen=True)
class GeneratorSpec:
    """What the generator process needs to build its engine."""

    model: LlamaConfig
    capacity: int
    engine_mode: str
    t0: float
    """``time.perf_counter()`` of run start: CLOCK_MONOTONIC is system-wide on Linux, so
    both processes stamp times on the same clock."""
    poll_s: float
    torch_threads: int = 1
    engine: str = "torch"
    """``torch`` or ``vllm`` (:mod:`real.engines.factory`)."""
    vllm_memory_share: float = 0.1
    """``gpu_memory_utilization`` of a vLLM engine."""
    vllm_dtype: str = "float32"
    """dtype of a vLLM engine."""


def generator_main(
    spec: GeneratorSpec, weights: SharedWeights, commands: Any, results: Any
) -> None:
    """Generator process body: ``(j, requests, params)`` commands in, ``("batch", j, results,
    version, pull_s)`` out; ``None`` ends it; an exception is sent as ``("error", text)``."""
    torch.set_num_threads(spec.torch_threads)
    parent = _CTX.parent_process()
    try:
        engine = _build_engine(spec)
        have = -1
        while True:
            cmd = _get(commands, spec.poll_s, parent)
            if cmd is None:
                return
            j, reqs, params = cmd
            t_pull = time.perf_counter()
            have = weights.pull(engine.update_weights, have)
            pull_s = time.perf_counter() - t_pull
            out = engine.generate(reqs, params)
            _put(results, ("batch", j, out, have, pull_s), spec.poll_s, parent)
    except Exception:  # why: the learner must learn what happened, not just that we are gone
        _put(results, ("error", traceback.format_exc()), spec.poll_s, parent)


def _build_engine(spec: GeneratorSpec) -> Any:
    """The generator's engine (random weights: the first pull installs the learner's)."""
    clock = lambda: time.perf_counter() - spec.t0
    if spec.engine == "torch":
        return TorchEngine(build_model(spec.model, 0), spec.capacity, clock, spec.engine_mode)
    from rolloutlab.real.engines.factory import engine_factory
    from rolloutlab.real.engines.vllm_engine import VllmConfig

    factory = engine_factory(
        spec.engine,
        spec.engine_mode,
        VllmConfig(gpu_memory_utilization=spec.vllm_memory_share, dtype=spec.vllm_dtype),
    )
    return factory(build_model(spec.model, 0), spec.capacity, clock)


def _get(q: Any, poll_s: float, parent: Any) -> Any:
    while True:
        try:
            return q.get(timeout=poll_s)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                os._exit(3)  # the learner is gone: nothing left to generate for


def _put(q: Any, item: Any, poll_s: float, parent: Any) -> None:
    while True:
        try:
            q.put(item, timeout=poll_s)
            return
        except queue.Full:
            if parent is not None and not parent.is_alive():
                os._exit(3)


class GeneratorHandle:
    """The learner's side of the generator process.

    Life cycle: :meth:`start` spawns it; :meth:`dispatch` sends batch commands;
    :meth:`receive` returns batch ``j`` (waiting, and raising :class:`GeneratorDied` if
    the process is gone or failed); :meth:`stop` ends it (always call it, also after an error).
    """

    def __init__(self, spec: GeneratorSpec, weights: SharedWeights, max_outstanding: int):
        self.spec, self.weights = spec, weights
        self.commands = _CTX.Queue()
        self.results = _CTX.Queue(maxsize=max_outstanding)
        self.proc = _CTX.Process(
            target=generator_main,
            args=(spec, weights, self.commands, self.results),
            name="rolloutlab-generator",
            daemon=True,
        )
        self.ready: dict[int, tuple[list[RolloutResult], int, float]] = {}

    @property
    def pid(self) -> int | None:
        """Process id of the generator (None before :meth:`start`)."""
        return self.proc.pid

    def start(self) -> None:
        """Spawn the generator process."""
        self.proc.start()

    def dispatch(self, j: int, reqs: list[RolloutRequest], params: SamplingParams) -> None:
        """Queue batch ``j`` for generation."""
        self.commands.put((j, reqs, params))

    def receive(self, j: int) -> tuple[list[RolloutResult], int, float]:
        """``(results, policy_version, pull_s)`` of batch ``j`` (batches arrive in dispatch order).

        Raises: GeneratorDied when the process exited or reported an exception.
        """
        while j not in self.ready:
            try:
                msg = self.results.get(timeout=self.spec.poll_s)
            except queue.Empty:
                if not self.proc.is_alive():
                    raise GeneratorDied(
                        f"generator process {self.proc.pid} exited with code "
                        f"{self.proc.exitcode} while the learner waited for batch {j}"
                    ) from None
                continue
            if msg[0] == "error":
                raise GeneratorDied(
                    f"generator process {self.proc.pid} failed on a batch before {j + 1}:\n{msg[1]}"
                )
            _, jj, res, version, pull_s = msg
            self.ready[jj] = (res, version, pull_s)
        return self.ready.pop(j)

    def stop(self, timeout_s: float = 5.0) -> None:
        """End the process: a stop command, then terminate if it does not exit in time."""
        if self.proc.pid is None:
            return
        deadline = time.perf_counter() + timeout_s
        try:
            self.commands.put(None)
        except (OSError, ValueError):
            pass
        while self.proc.is_alive() and time.perf_counter() < deadline:
            try:  # why: a generator blocked on a full result queue must get to read the stop
                self.results.get_nowait()
            except (queue.Empty, OSError, ValueError, EOFError):
                pass
            self.proc.join(0.05)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout_s)
        for q in (self.commands, self.results):
            q.cancel_join_thread()  # why: never block interpreter exit on a dead reader
            q.close()
