"""Cost-model calibration from a timing grid on vLLM: the plan, the fit and the file (no vllm).

Each grid cell runs ``n`` requests together, each with a distinct prompt of ``P`` tokens
and exactly ``L`` generated tokens (``ignore_eos``, ``min_tokens = max_tokens = L``), so
the batch is known at every iteration: one prefill iteration admits all ``n`` prompts
(the planner keeps ``n * P`` within ``max_num_batched_tokens`` so the prefill is not
chunked), then ``L - 1`` decode iterations run with ``n`` sequences whose context grows
from ``n (P + 1)`` to ``n (P + L - 1)`` tokens.

With :class:`sim.cost.LinearCost` (``t_iter = a + b n + c ctx``, plus
``prefill_s_per_token`` per admitted prompt token; :func:`sim.engine.reference_generate`
counts the admitting iteration's context as ``n P``), a cell predicts

- mean decode iteration ``a + b n + c n (P + L / 2)``;
- prefill iteration ``a + b n + (c + p) n P``.

The runner (:mod:`calibration.vllm_runner`, GPU) measures both per cell from vLLM's
monotonic per-request stamps: decode = median over requests of
``(last_token_ts - first_token_ts) / (L - 1)``, prefill = ``max first_token_ts - min
scheduled_ts``. :func:`fit_grid` finds ``a, b, c, p >= 0`` minimising squared relative
errors (rows divided by the measured time; ``scipy.optimize.nnls``), the criterion of
:mod:`calibration.cost_fit`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
from rolloutlab.sim.cost import LinearCost
from scipy import optimize


@dataclass(frozen=True)
class GridSpec:
    """The grid to measure (the planner drops cells that do not fit the engine)."""

    running_seqs: tuple[int, ...] = (1, 8, 32, 128)
    """Concurrent sequences ``n`` per cell."""
    prompt_tokens: tuple[int, ...] = (64, 512, 2048)
    """Prompt length ``P`` per request: sets the context the decode iterations read."""
    response_tokens: int = 64
    """Generated tokens ``L`` per request (fixed: ``ignore_eos``, ``min_tokens = max_tokens``)."""
    repeats: int = 2
    """Runs per cell; the median is kept (the first run of the engine is a separate warm-up)."""
    kv_headroom: float = 0.9
    """Share of the KV cache a cell may fill (``n (P + L) <= kv_headroom * kv_tokens``), so no preemption."""

    def __post_init__(self) -> None:
        if (
            not self.running_seqs
            or not self.prompt_tokens
            or min(self.running_seqs) < 1
            or min(self.prompt_tokens) < 1
        ):
            raise ValueError(
                f"GridSpec: need non-empty running_seqs and prompt_tokens >= 1: {self}"
            )
        if self.response_tokens < 2 or self.repeats < 1 or not (0 < self.kv_headroom <= 1):
            raise ValueError(
                f"GridSpec: need response_tokens >= 2, repeats >= 1, 0 < kv_headroom <= 1: {self}"
            )


@dataclass(frozen=True)
class GridCell:
    """One cell: ``running_seqs`` requests of ``prompt_tokens`` + ``response_tokens`` tokens."""

    running_seqs: int
    prompt_tokens: int
    response_tokens: int

    @property
    def decode_context_tokens(self) -> float:
        """Mean context (tokens, all sequences) over the decode iterations: ``n (P + L / 2)``."""
        return self.running_seqs * (self.prompt_tokens + self.response_tokens / 2)

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens admitted in the prefill iteration: ``n P``."""
        return self.running_seqs * self.prompt_tokens


@dataclass(frozen=True)
class EngineLimits:
    """What the engine allows, read after it started (vLLM's resolved config)."""

    max_num_seqs: int
    max_model_len: int
    kv_cache_tokens: int
    """KV-cache capacity in tokens (``kv_cache_size_tokens``, else ``num_gpu_blocks * block_size``)."""
    max_num_batched_tokens: int
    """Tokens one iteration may process (larger prefills are chunked)."""


def plan_grid(
    spec: GridSpec, limits: EngineLimits
) -> tuple[list[GridCell], list[tuple[GridCell, str]]]:
    """Cells of ``spec`` that fit ``limits``, and the dropped ones with the reason.

    A cell fits when ``n <= max_num_seqs``, ``P + L <= max_model_len``,
    ``n (P + L) <= kv_headroom * kv_cache_tokens`` and ``n P <= max_num_batched_tokens``.
    Order: by ``n`` then ``P`` (deterministic). Raises: ValueError when fewer than 4 cells
    fit (four coefficients are fitted) or fewer than 2 distinct ``n`` or context values.
    """
    kept, dropped = [], []
    for n in sorted(set(spec.running_seqs)):
        for P in sorted(set(spec.prompt_tokens)):
            cell = GridCell(n, P, spec.response_tokens)
            why = []
            if n > limits.max_num_seqs:
                why.append(f"n {n} > max_num_seqs {limits.max_num_seqs}")
            if P + cell.response_tokens > limits.max_model_len:
                why.append(
                    f"P + L {P + cell.response_tokens} > max_model_len {limits.max_model_len}"
                )
            if n * (P + cell.response_tokens) > spec.kv_headroom * limits.kv_cache_tokens:
                why.append(
                    f"n (P + L) {n * (P + cell.response_tokens)} > {spec.kv_headroom} x KV "
                    f"{limits.kv_cache_tokens} tokens"
                )
            if cell.prefill_tokens > limits.max_num_batched_tokens:
                why.append(
                    f"n P {cell.prefill_tokens} > max_num_batched_tokens {limits.max_num_batched_tokens}"
                )
            (dropped.append((cell, "; ".join(why))) if why else kept.append(cell))
    if (
        len(kept) < 4
        or len({c.running_seqs for c in kept}) < 2
        or len({c.prompt_tokens for c in kept}) < 2
    ):
        raise ValueError(
            f"plan_grid: {len(kept)} cells fit the engine ({limits}); need >= 4 with >= 2 "
            f"values of running_seqs and of prompt_tokens. Dropped: "
            f"{[(asdict(c), w) for c, w in dropped][:4]}"
        )
    return kept, dropped


@dataclass(frozen=True)
class CellTiming:
    """What one cell measured (seconds)."""

    cell: GridCell
    decode_iter_s: float
    """Median over requests of (last - first token time) / (L - 1)."""
    prefill_s: float
    """First scheduled to last first token: the prefill iteration."""
    call_s: float = 0.0
    """Wall time of the whole ``generate`` call (driver clock)."""
    span_s: float = 0.0
    """Engine time from first arrival to last token (run clock), so ``call_s - span_s`` is overhead."""


@dataclass(frozen=True)
class GridFit:
    """Fitted decode/prefill coefficients and fit quality."""

    a_s: float
    b_s: float
    c_s: float
    prefill_s_per_token: float
    gen_overhead_s: float
    decode_mape: float
    """Mean |pred / measured - 1| over the cells' decode iterations."""
    prefill_mape: float
    """Same over the cells' prefill iterations."""
    decode_max_rel_err: float
    cells: list[dict] = field(default_factory=list)
    """Per cell: n, P, L, measured and predicted times."""

    def cost(self) -> LinearCost:
        """The generation part of :class:`sim.cost.LinearCost` (learner and sync left 0)."""
        return LinearCost(
            a_s=self.a_s,
            b_s=self.b_s,
            c_s=self.c_s,
            prefill_s_per_token=self.prefill_s_per_token,
            gen_overhead_s=self.gen_overhead_s,
        )


def design_rows(timings: list[CellTiming]) -> tuple[np.ndarray, np.ndarray]:
    """Design matrix ``(2 k, 4)`` over ``[a, b, c, p]`` and targets ``(2 k,)``: per cell a
    decode row ``[1, n, n (P + L/2), 0]`` then a prefill row ``[1, n, n P, n P]``."""
    X, y = [], []
    for t in timings:
        c = t.cell
        X.append([1.0, c.running_seqs, c.decode_context_tokens, 0.0])
        y.append(t.decode_iter_s)
        X.append([1.0, c.running_seqs, c.prefill_tokens, c.prefill_tokens])
        y.append(t.prefill_s)
    return np.asarray(X, dtype=float), np.asarray(y, dtype=float)


def fit_grid(timings: list[CellTiming]) -> GridFit:
    """Fit ``a, b, c, p >= 0`` to the grid (relative least squares); see the module docstring.

    ``gen_overhead_s`` is the median of ``call_s - span_s`` (0 when not measured).
    Raises: ValueError on fewer than 4 cells or a non-positive time.
    """
    if len(timings) < 4:
        raise ValueError(f"fit_grid: need >= 4 measured cells, got {len(timings)}")
    X, y = design_rows(timings)
    if not (np.isfinite(y).all() and (y > 0).all()):
        bad = [asdict(t.cell) for t in timings if not (t.decode_iter_s > 0 and t.prefill_s > 0)]
        raise ValueError(
            f"fit_grid: decode and prefill times must be positive and finite; bad cells {bad}"
        )
    scale = np.maximum(np.abs(X).max(axis=0), 1e-300)  # columns O(1): nnls is scale-sensitive
    coef, _ = optimize.nnls((X / scale) / y[:, None], np.ones_like(y))
    theta = coef / scale
    pred = X @ theta
    rel = pred / y - 1.0  # (2k,) decode rows even, prefill rows odd
    overhead = [t.call_s - t.span_s for t in timings if t.call_s > 0]
    cells = [
        {
            **asdict(t.cell),
            "decode_iter_s": t.decode_iter_s,
            "decode_pred_s": float(pred[2 * i]),
            "prefill_s": t.prefill_s,
            "prefill_pred_s": float(pred[2 * i + 1]),
            "call_s": t.call_s,
            "span_s": t.span_s,
        }
        for i, t in enumerate(timings)
    ]
    return GridFit(
        a_s=float(theta[0]),
        b_s=float(theta[1]),
        c_s=float(theta[2]),
        prefill_s_per_token=float(theta[3]),
        gen_overhead_s=float(max(np.median(overhead), 0.0)) if overhead else 0.0,
        decode_mape=float(np.mean(np.abs(rel[0::2]))),
        prefill_mape=float(np.mean(np.abs(rel[1::2]))),
        decode_max_rel_err=float(np.max(np.abs(rel[0::2]))),
        cells=cells,
    )


def grid_calibration(
    fit: GridFit, resolved: dict, spec: GridSpec, base: dict, name: str, provenance: dict
) -> dict:
    """The calibration dict (format of :mod:`sim.scenario`) of a grid fit.

    ``base``: a calibration dict (a bundled scenario's) whose ``lengths``,
    ``prompt_tokens`` and ``defaults`` are reused: a timing grid measures no response
    lengths. The cost's learner and sync terms are 0 (not measured by a grid). The
    engine is one worker with the engine's resolved ``max_num_seqs``.
    Raises: :class:`sim.scenario.CalibrationError` if the result would not load.
    """
    from rolloutlab.calibration.writer import calibration_dict

    engine = {
        "n_workers": 1,
        "max_num_seqs": int(resolved.get("max_num_seqs") or max(spec.running_seqs)),
        "dispatch": "group",
        "prefix_caching": True,
    }
    fit_d = {
        "method": "vllm-grid: relative NNLS on decode and prefill iteration times",
        "decode_mape": fit.decode_mape,
        "prefill_mape": fit.prefill_mape,
        "decode_max_rel_err": fit.decode_max_rel_err,
        "n_cells": len(fit.cells),
        "cells": fit.cells,
        "not_measured": ["lengths", "learner", "sync"],
    }
    prov = {
        **provenance,
        "source": "vllm-grid",
        "engine": resolved,
        "grid": asdict(spec),
        "lengths_from": base.get("name"),
    }
    return calibration_dict(
        name=name,
        lengths=base["lengths"],
        prompt_tokens=base["prompt_tokens"],
        cost=fit.cost().to_dict(),
        engine=engine,
        defaults=base.get("defaults", {}),
        provenance=prov,
        fit=fit_d,
    )
