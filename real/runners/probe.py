"""A per-step machine-speed probe: the CPU time of a small fixed workload.

On a shared machine the process CPU time of the *same* work drifts with the other
processes' load (caches, the sibling hyperthread, memory bandwidth), so ``--clock cpu``
does not remove load entirely (docs/multi_turn.md "Predicted against measured"). The
runners time two fixed workloads once a step, outside the step's timed phases (before
the step's clock starts), on the thread count the run set with ``torch.set_num_threads``,
and log them in ``learner.jsonl``:

- ``timing_s/probe_model``: process CPU seconds of ``MODEL_REPEATS`` forwards of the
  run's policy model on fixed token ids ``(MODEL_ROWS, MODEL_TOKENS)`` (about 10 ms; the
  same work whatever the weights). ``compare idle --clock probe``
  (:func:`rolloutlab.analysis.idle.probe_clock.on_probe_clock`) divides each step's CPU times
  by ``probe / median probe over the fit steps``;
- ``timing_s/probe`` (CPU) and ``timing_s/probe_wall`` (wall): ``PROBE_REPEATS``
  products of a fixed ``(PROBE_ROWS, PROBE_DIM)`` float32 tensor with a fixed
  ``(PROBE_DIM, PROBE_DIM)`` matrix, each followed by a ``tanh`` (about 13 ms). Its
  working set (64 KiB) stays in the core's caches, and it tracks the runs' CPU drift
  less well than the model probe (docs/multi_turn.md); kept for that comparison.
"""

from __future__ import annotations

import time

import torch

PROBE_ROWS = 32
"""Rows of the probe's activation tensor."""
PROBE_DIM = 128
"""Width of the probe's activation tensor and side of its square weight matrix."""
PROBE_REPEATS = 400
"""Matmul + tanh pairs per probe (fixed: the probe's work never changes)."""
MODEL_ROWS, MODEL_TOKENS, MODEL_REPEATS = 16, 16, 2
"""The model probe: forwards of a fixed ``(16, 16)`` id tensor, twice (about 10 ms)."""


class SpeedProbe:
    """The fixed workload, its tensors built once (seeded, so every run's are identical).

    :meth:`measure` runs it and returns ``(cpu_s, wall_s)``: the process CPU seconds
    (``time.process_time``) and wall seconds (``time.perf_counter``) it took.
    """

    def __init__(self) -> None:
        gen = torch.Generator().manual_seed(0)
        self._x = torch.randn(PROBE_ROWS, PROBE_DIM, generator=gen)
        self._w = torch.randn(PROBE_DIM, PROBE_DIM, generator=gen) / PROBE_DIM**0.5

    def measure(self) -> tuple[float, float]:
        """Run the workload once; returns ``(cpu_s, wall_s)``, both in seconds."""
        x, w = self._x, self._w
        cpu0, wall0 = time.process_time(), time.perf_counter()
        with torch.no_grad():
            for _ in range(PROBE_REPEATS):
                x = torch.tanh(x @ w)
        return time.process_time() - cpu0, time.perf_counter() - wall0

    def record(self, model: torch.nn.Module | None = None) -> dict[str, float]:
        """Run the workload once; returns the ``learner.jsonl`` fields
        ``{"timing_s/probe": cpu_s, "timing_s/probe_wall": wall_s}``, plus, given the
        run's policy ``model`` (called as ``model(ids)``), ``"timing_s/probe_model"``: the
        CPU seconds of ``MODEL_REPEATS`` forwards of fixed token ids
        ``(MODEL_ROWS, MODEL_TOKENS)`` (the same work whatever the weights)."""
        cpu_s, wall_s = self.measure()
        out = {"timing_s/probe": cpu_s, "timing_s/probe_wall": wall_s}
        if model is not None:
            cfg = getattr(model, "cfg", None)  # the project's LlamaLM carries its config
            vocab = int(cfg.vocab_size) if cfg is not None else 2
            ids = torch.arange(MODEL_ROWS * MODEL_TOKENS).reshape(MODEL_ROWS, MODEL_TOKENS) % vocab
            cpu0 = time.process_time()
            with torch.no_grad():
                for _ in range(MODEL_REPEATS):
                    model(ids)
            out["timing_s/probe_model"] = time.process_time() - cpu0
        return out
