"""bench/step_cost_validation.py's per-phase view of plan 2 (results/step_cost_law/plan2/):
the power law fitted to one phase alone, and the learner's work per step."""

import importlib.util
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from rolloutlab.analysis.learning.step_cost import pooled_cost
from rolloutlab.calibration.readers.run_curve import RunCurve

pytest.importorskip("torch")

_PATH = Path(__file__).resolve().parents[1] / "bench" / "step_cost_validation.py"
_SPEC = importlib.util.spec_from_file_location("step_cost_validation", _PATH)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def _cpu_steps(G, B, T, gen, train, sync):
    """A CPU-clock steps table (as analysis.learning.compare.run_steps gives) and its curve."""
    span = gen + train + sync
    t_end = np.cumsum(np.full(T, span))
    steps = pl.DataFrame({"step": np.arange(T), "t_start": t_end - span, "t_end": t_end,
                          "gen_time": np.full(T, gen), "train_time": np.full(T, train),
                          "sync_time": np.full(T, sync)})  # fmt: skip
    return steps, RunCurve(np.full(T, G), np.full(T, 3e-4), [np.zeros(B, int)] * T, True)


def test_a_phase_s_power_law_is_fitted_to_that_phase_alone():
    # generation grows as 0.01 (B G)^0.6, training as 0.001 (B G)^1.2, sync 5 ms
    runs = [_cpu_steps(G, B, 6, 0.01 * (G * B) ** 0.6, 0.001 * (G * B) ** 1.2, 0.005)
            for G, B in ((4, 4), (8, 8), (16, 8))]  # fmt: skip
    curves = [c for _, c in runs]
    train = pooled_cost([bench.phase_steps(s, "train") for s, _ in runs], curves)
    assert train == pytest.approx((0.0, 0.001, 1.2), rel=1e-9, abs=1e-12)
    gen = pooled_cost([bench.phase_steps(s, "gen") for s, _ in runs], curves)
    assert gen == pytest.approx((0.0, 0.01, 0.6), rel=1e-9, abs=1e-12)
    whole = pooled_cost([bench.phase_steps(s, "step") for s, _ in runs], curves)
    assert whole[0] == pytest.approx(0.005)  # the whole step keeps its sync as c0


def test_training_work_counts_trained_rollouts_and_their_padding():
    # three steps: nothing trained; 4 rollouts padded to 10; 6 padded to 20
    feats = pl.DataFrame({"rows": [0, 4, 6], "cells": [0, 40, 120]})
    work = bench.training_work(feats)
    assert work["trained_rollouts"] == pytest.approx(10 / 3)
    assert work["padded_length"] == pytest.approx(15.0)  # over the steps that trained
    assert work["padded_tokens"] == pytest.approx(160 / 3)


def _held_table(law, plan2_draw, power):
    """A plan-3 table of two held-out settings and one fit setting (errors as fractions)."""
    rows = []
    for i, role in enumerate(("held out", "held out", "fit setting")):
        row = {"G": 16, "B": 16, "capacity": 64, "seed": i, "role": role}
        for k in bench.RULES3:
            row[k + "_error"] = {"law": law, "law_plan2_draw": plan2_draw,
                                 "power_law": power}.get(k, [0.5, 0.5])[i % 2]  # fmt: skip
        rows.append(row)
    return pl.DataFrame(rows)


def test_plan3_passes_only_when_each_step_is_within_10_and_training_beats_both():
    step_ok = _held_table([0.09, -0.10], [0.2, 0.2], [0.2, 0.2])
    train_ok = _held_table([0.05, -0.07], [-0.10, -0.03], [0.30, 0.01])  # 6.0 < 6.5, 15.5
    assert "Plan 3 passes" in bench.verdict3(step_ok, train_ok)
    step_miss = _held_table([0.09, -0.11], [0.2, 0.2], [0.2, 0.2])  # one step 11 % off
    text = bench.verdict3(step_miss, train_ok)
    assert "Plan 3 fails" in text and "(1) Whole step" in text and ": not met (" in text
    train_tie = _held_table([0.05, -0.07], [-0.10, -0.02], [0.30, 0.01])  # 6.0 = 6.0
    assert "Plan 3 fails" in bench.verdict3(step_ok, train_tie)
    # the fit setting's errors (row 3: 0.09 / 0.05) never enter the verdict
    step_fit_off = step_ok.with_columns(
        law_error=pl.when(pl.col("role") == "fit setting").then(0.9).otherwise(pl.col("law_error"))
    )
    assert "Plan 3 passes" in bench.verdict3(step_fit_off, train_ok)
