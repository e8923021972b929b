"""Fit the learner roofline's efficiencies (:mod:`sim.models.learner_cost`) to verl logs.

A verl TensorBoard run (:func:`calibration.readers.verl_tb.read_run`) logs per step
``perf/total_num_tokens`` (prompt + response tokens of the batch) and the seconds of
``timing_s/old_log_prob``, ``timing_s/ref`` and ``timing_s/update_actor``. Each phase is
``A / mfu + C`` in the roofline (compute at peak ``A``, communication and optimizer
``C``, both known from the model, GPU and layout), so each step gives
``mfu = A / (t - C)``; the fit is the median over the run's steps (from step
``skip``: the first steps compile and warm caches), the forward MFU pooled over the
actor's and the reference's log-prob passes.

Why only MFUs: the bundled runs are all on one node of 8 H20 (SOURCE.md of
``verl_async_reward_grpo_tb``), so the communication terms cannot be fitted from them;
they stay the roofline's, from the link bandwidths.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from rolloutlab.calibration.readers.verl_tb import require
from rolloutlab.sim.models.hardware import Accelerator, ModelConfig
from rolloutlab.sim.models.learner_cost import (
    Layout,
    LearnerEfficiency,
    Network,
    learner_phases,
)

TOKENS = "perf/total_num_tokens"
FORWARD = ("timing_s/old_log_prob", "timing_s/ref")
TRAIN = "timing_s/update_actor"


def _split(model, gpu, layout, tokens, net) -> dict[str, tuple[float, float]]:
    """Per phase ``(A, C)`` with ``t = A / mfu + C`` (from the roofline at mfu 1 and 1/2)."""
    one = learner_phases(model, gpu, layout, tokens, LearnerEfficiency(1.0, 1.0), net)
    half = learner_phases(model, gpu, layout, tokens, LearnerEfficiency(0.5, 0.5), net)
    return {k: (half[k] - one[k], 2 * one[k] - half[k]) for k in one}


def fit_efficiency(
    table: pl.DataFrame,
    model: ModelConfig,
    gpu: Accelerator,
    layout: Layout,
    net: Network | None = None,
    skip: int = 2,
    source: str = "<table>",
) -> LearnerEfficiency:
    """Median per-step MFUs of a verl step table (module docstring).

    Raises :class:`calibration.readers.verl_tb.VerlLogError` naming ``source`` and the
    tag when a needed tag is missing, ValueError when no step is left after ``skip`` or
    a fitted MFU falls outside (0, 1] (a phase faster than the GPU's peak)."""
    net = net or Network()
    require(table, (TOKENS, *FORWARD, TRAIN), source)
    rows = table.filter(pl.col("step") >= table["step"].min() + skip).drop_nulls(
        [TOKENS, *FORWARD, TRAIN]
    )
    if rows.height == 0:
        raise ValueError(f"{source}: no step with every learner timing after the first {skip}")
    fwd, train = [], []
    for r in rows.iter_rows(named=True):
        parts = _split(model, gpu, layout, r[TOKENS], net)
        fwd += [parts[k][0] / (r[k] - parts[k][1]) for k in FORWARD]
        train.append(parts[TRAIN][0] / (r[TRAIN] - parts[TRAIN][1]))
    eff = (float(np.median(fwd)), float(np.median(train)))
    if not all(0 < e <= 1 for e in eff):
        raise ValueError(f"{source}: fitted MFUs {eff} outside (0, 1]; wrong GPU or layout?")
    return LearnerEfficiency(*eff)


def predict(
    table: pl.DataFrame,
    model: ModelConfig,
    gpu: Accelerator,
    layout: Layout,
    eff: LearnerEfficiency,
    net: Network | None = None,
    skip: int = 2,
) -> pl.DataFrame:
    """Median measured and predicted seconds per phase over the steps from ``skip``:
    columns ``phase, measured_s, predicted_s, error`` (``predicted / measured - 1``)."""
    net = net or Network()
    rows = table.filter(pl.col("step") >= table["step"].min() + skip)
    tokens = float(rows[TOKENS].median())
    pred = learner_phases(model, gpu, layout, tokens, eff, net)
    out = [
        (k, float(rows[k].median()), pred[k], pred[k] / float(rows[k].median()) - 1.0)
        for k in (*FORWARD, TRAIN)
    ]
    return pl.DataFrame(out, schema=["phase", "measured_s", "predicted_s", "error"], orient="row")
