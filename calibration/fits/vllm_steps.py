"""Fit :class:`sim.models.cost.LinearCost` to vLLM's own scheduler steps, as recorded by
:mod:`real.engines.vllm_sched_probe` (one row per step: the requests that sample a token,
their context tokens, the prefill tokens, the step's wall time).

One step of the paged engine costs ``a_s + b_s n + c_s ctx + prefill_s_per_token p``
(:meth:`sim.models.cost.LinearCost.iteration_s`), ``n`` the producing sequences, ``ctx`` the sum
of their ``prompt + generated`` tokens and ``p`` the prefill tokens; the four coefficients
are the non-negative least squares solution (``scipy.optimize.nnls``) over the steps of
the timing grid. Least squares on the times themselves (not their logs or ratios) keeps
the sum of predicted step times unbiased, and a makespan is such a sum.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rolloutlab.sim.models.cost import LinearCost
from scipy import optimize

FEATURES = ("producing", "context_tokens", "prefill_tokens")
"""Per-step columns of a probe record read here (besides ``step_s``)."""


def step_features(steps: dict) -> np.ndarray:
    """``(n_steps, 4)`` ``[1, producing, context tokens, prefill tokens]`` of one batch's
    ``steps`` record. Raises ValueError naming a missing or ragged column."""
    missing = [k for k in (*FEATURES, "step_s") if k not in steps]
    if missing:
        raise ValueError(f"probe steps record lacks column(s) {missing}")
    cols = [np.asarray(steps[k], dtype=float) for k in FEATURES]
    n = len(steps["step_s"])
    if any(len(c) != n for c in cols):
        raise ValueError("probe steps record: columns of different lengths")
    return np.column_stack([np.ones(n), *cols])


def fit_step_cost(batches: Sequence[dict], clock: str = "step_s") -> tuple[LinearCost, float]:
    """Fit the step cost to the ``steps`` records of ``batches`` (each a probe batch:
    ``{"steps": {...}}``), times from column ``clock`` (``step_s`` wall, ``step_cpu_s``
    CPU). Returns ``(cost, mean |pred/measured - 1| per step)``. Raises ValueError with
    fewer than 4 steps, a non-positive step time or a missing column."""
    X = np.vstack([step_features(b["steps"]) for b in batches])
    if any(clock not in b["steps"] for b in batches):
        raise ValueError(f"probe steps record lacks column {clock!r}")
    y = np.concatenate([np.asarray(b["steps"][clock], dtype=float) for b in batches])
    if len(y) < 4 or (y <= 0).any():
        raise ValueError("fit_step_cost: need >= 4 steps, all with positive times")
    scale = np.maximum(X.max(axis=0), 1.0)  # (why: columns of 1 and of ~1e3 tokens)
    coef = optimize.nnls(X / scale, y)[0] / scale
    cost = LinearCost(a_s=coef[0], b_s=coef[1], c_s=coef[2], prefill_s_per_token=coef[3])
    return cost, float(np.mean(np.abs(X @ coef / y - 1.0)))


def steps_calibration(
    measurement: dict,
    setting: str,
    base: dict,
    name: str,
    provenance: dict,
    clock: str = "step_cpu_s",
) -> dict:
    """The calibration dict (format of :mod:`sim.scenario.scenario`) of one setting of a probe
    measurement (:mod:`real.engines.vllm_sched_probe`): the step cost fitted on its
    timing grid (:func:`fit_step_cost` on column ``clock``) and the paged engine of its pinned
    scheduler (one worker, ``num_blocks - 1`` KV blocks, the same block size, slots,
    token budget, chunking and caching, group mates recomputing their prompt's partial
    block). ``base``: a calibration dict whose ``lengths``, ``prompt_tokens`` and
    ``defaults`` are reused (a timing grid measures no response lengths). Raises
    ValueError naming an unknown setting; :class:`sim.scenario.scenario.CalibrationError` if the
    result would not load."""
    from rolloutlab.calibration.scenarios.writer import calibration_dict

    settings = measurement.get("settings", {})
    if setting not in settings:
        raise ValueError(f"no setting {setting!r} in the measurement (has {sorted(settings)})")
    rec = settings[setting]
    st = rec["setting"]
    cost, mape = fit_step_cost(rec["grid"], clock)
    engine = {
        "n_workers": 1,
        "max_num_seqs": st["max_num_seqs"],
        "dispatch": "group",
        "prefix_caching": st["prefix_caching"],
        "kv_blocks": st["num_blocks"] - 1,
        "block_size": st["block_size"],
        "max_num_batched_tokens": st["max_num_batched_tokens"],
        "chunked_prefill": st["chunked_prefill"],
        "recompute_partial_block": True,
    }
    fit = {
        "method": f"vllm-steps: NNLS of per-step times ({clock}) on the timing grid",
        "step_mape": mape,
        "n_steps": sum(len(b["steps"]["step_s"]) for b in rec["grid"]),
        "not_measured": ["lengths", "learner", "sync"],
    }
    prov = {
        **provenance,
        "source": "vllm-steps",
        "vllm_version": measurement.get("vllm_version"),
        "setting": st,
        "lengths_from": base.get("name"),
    }
    return calibration_dict(
        name=name,
        lengths=base["lengths"],
        prompt_tokens=base["prompt_tokens"],
        cost=cost.to_dict(),
        engine=engine,
        defaults=base.get("defaults", {}),
        provenance=prov,
        fit=fit,
    )
