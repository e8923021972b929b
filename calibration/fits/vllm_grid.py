"""Cost-model calibration from a timing grid measured on vLLM: the fit and the file (no vllm).

Each grid cell runs ``n`` requests together, each with a distinct prompt of ``P`` tokens
and exactly ``L`` generated tokens (``ignore_eos``, ``min_tokens = max_tokens = L``), so
the batch is known at every iteration: one prefill iteration admits all ``n`` prompts
(the planner keeps ``n * P`` within ``max_num_batched_tokens`` so the prefill is not
chunked), then ``L - 1`` decode iterations run with ``n`` sequences whose context grows
from ``n (P + 1)`` to ``n (P + L - 1)`` tokens.

With :class:`sim.models.cost.LinearCost` (``t_iter = a + b n + c ctx``, plus
``prefill_s_per_token`` per admitted prompt token; :func:`tests.reference.engine_loop.reference_generate`
counts the admitting iteration's context as ``n P``), a cell predicts

- mean decode iteration ``a + b n + c n (P + L / 2)``;
- prefill iteration ``a + b n + (c + p) n P``.

The grid is planned by :mod:`real.engines.timing_grid`; the runner (:mod:`real.engines.vllm_grid`,
GPU) measures both per cell (:class:`sim.models.cost_grid.CellTiming`) from vLLM's
monotonic per-request stamps: decode = median over requests of
``(last_token_ts - first_token_ts) / (L - 1)``, prefill = ``max first_token_ts - min
scheduled_ts``. :func:`fit_grid` finds ``a, b, c, p >= 0`` minimising squared relative
errors (rows divided by the measured time; ``scipy.optimize.nnls``), the criterion of
:mod:`calibration.fits.cost_fit`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
from rolloutlab.sim.models.cost import LinearCost
from rolloutlab.sim.models.cost_grid import CellTiming
from scipy import optimize


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
        """The generation part of :class:`sim.models.cost.LinearCost` (learner and sync left 0)."""
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
        gen_overhead_s=max(float(np.median(overhead)), 0.0) if overhead else 0.0,
        decode_mape=float(np.mean(np.abs(rel[0::2]))),
        prefill_mape=float(np.mean(np.abs(rel[1::2]))),
        decode_max_rel_err=float(np.max(np.abs(rel[0::2]))),
        cells=cells,
    )


def grid_calibration(
    fit: GridFit, resolved: dict, grid: dict, base: dict, name: str, provenance: dict
) -> dict:
    """The calibration dict (format of :mod:`sim.scenario.scenario`) of a grid fit.

    ``grid``: the measured grid as a dict (``running_seqs``, ``prompt_tokens``, ... of
    :class:`real.engines.timing_grid.GridSpec`), kept in the provenance.
    ``base``: a calibration dict (a bundled scenario's) whose ``lengths``,
    ``prompt_tokens`` and ``defaults`` are reused: a timing grid measures no response
    lengths. The cost's learner and sync terms are 0 (not measured by a grid). The
    engine is one worker with the engine's resolved ``max_num_seqs``.
    Raises: :class:`sim.scenario.scenario.CalibrationError` if the result would not load.
    """
    from rolloutlab.calibration.scenarios.writer import calibration_dict

    engine = {
        "n_workers": 1,
        "max_num_seqs": int(resolved.get("max_num_seqs") or max(grid["running_seqs"])),
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
        "grid": grid,
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
