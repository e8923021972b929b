"""What a controller would have done on a logged run: a simulated run (``rolloutlab sim
--calibration`` on a per-sample calibration, several controllers) replayed against the
per-sample log it was calibrated on (``rolloutlab compare replay``).

For each controller (``run_id`` of the simulated ``rollouts.parquet``) and each simulated
step ``s`` with ``B_s`` prompts of ``G_s`` samples (SAGC's own choice of G at that step):

* **predicted**: the straggler event ``max/median > tau`` (SAGC, PAPERS.md §1;
  :func:`calibration.validation.groups.step_ratio`) and the length idle share
  ``1 - mean(L)/max(L)`` of the simulated step's response lengths;
* **measured**: the same two quantities on the logged step ``s`` (the last logged step
  beyond the log's end) subsampled at ``(B_s, G_s)`` without replacement, ``draws``
  times (:func:`calibration.validation.groups.subsample`; unequal group sizes allowed).

The length idle share is the slot idle of a step whose sequences all start together and
decode one token per step each (:func:`sim.trace.metrics.slot_idle_fraction` with finish
time proportional to length): a log holds no timing, so this is the idle that can be
measured on it. The simulator's own time-based ``slot_idle_frac`` (prefill, batching,
preemption) is reported beside it, unmeasured.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from rolloutlab.calibration.readers.grouped import GroupedDataError, GroupedTrace
from rolloutlab.calibration.validation.groups import eligible, padded, step_ratio, subsample
from rolloutlab.sim.trace.metrics import step_metrics

COLUMNS = (
    "controller",
    "mean_G",
    "tau",
    "p_straggler_pred",
    "p_straggler_meas",
    "abs_error",
    "len_idle_pred",
    "len_idle_meas",
    "slot_idle_sim",
    "n_steps",
)
"""Columns of ``replay.csv``: one row per controller and tau."""


def length_idle(lengths: np.ndarray) -> np.ndarray:
    """``1 - mean/max`` over the last two axes of ``(..., B, G)`` lengths: the slot idle
    share of a step whose sequences start together and take time proportional to length."""
    flat = np.asarray(lengths, dtype=np.float64).reshape(*lengths.shape[:-2], -1)
    return 1.0 - flat.mean(axis=-1) / flat.max(axis=-1)


def _sim_steps(rollouts: pl.DataFrame) -> list[tuple[int, np.ndarray]]:
    """``(step, (B, G) lengths)`` of one simulated controller's steps (aborts left out)."""
    out = []
    done = rollouts.filter(pl.col("finish_reason") != "abort")
    for (step,), df in done.sort("step", "prompt_id", "sample_idx").group_by(
        "step", maintain_order=True
    ):
        groups = [g["response_tokens"].to_numpy() for _, g in df.group_by("prompt_id")]
        G = min(len(g) for g in groups)
        out.append((int(step), np.stack([g[:G] for g in groups])))
    return out


def replay(
    trace: GroupedTrace,
    rollouts: pl.DataFrame,
    taus: tuple[float, ...],
    draws: int = 50,
    seed: int = 0,
) -> pl.DataFrame:
    """The table of :data:`COLUMNS` (module docstring). ``rollouts``: a simulated run's
    rollout table (:data:`sim.trace.schema.ROLLOUT_SCHEMA`), any number of controllers.

    Raises GroupedDataError naming the logged step when a simulated step asks for more
    groups of ``G_s`` samples than that logged step holds (simulate with ``--prompts``
    at most the logged B and G at most the logged group size)."""
    mats = [padded(g) for g in trace.groups("length")]
    steps = trace.steps()
    rows = []
    for (controller,), sim in rollouts.group_by("run_id", maintain_order=True):
        per_step = _sim_steps(sim)
        idle_sim = float(step_metrics(sim)["slot_idle_frac"].mean())
        pred_r, pred_i, meas_r, meas_i, gs = [], [], [], [], []
        for k, (s, L) in enumerate(per_step):
            B, G = L.shape
            i = min(s, len(mats) - 1)
            if eligible(mats[i], G) < B:
                raise GroupedDataError(
                    f"{trace.samples['source'][0]}: field 'step': logged step {steps[i]} has "
                    f"{eligible(mats[i], G)} groups of {G} samples; {controller} simulated {B}"
                )
            rng = np.random.default_rng([seed, k])
            sub = subsample(rng, mats[i], B, G, draws)
            pred_r.append(step_ratio(L[None])[0])
            pred_i.append(length_idle(L[None])[0])
            meas_r.append(step_ratio(sub))
            meas_i.append(length_idle(sub).mean())
            gs.append(G)
        ratios = np.stack(meas_r)  # (steps, draws)
        for t in taus:
            p_pred = float((np.asarray(pred_r) > t).mean())
            p_meas = float((ratios > t).mean())
            rows.append(
                {
                    "controller": str(controller),
                    "mean_G": float(np.mean(gs)),
                    "tau": float(t),
                    "p_straggler_pred": p_pred,
                    "p_straggler_meas": p_meas,
                    "abs_error": abs(p_pred - p_meas),
                    "len_idle_pred": float(np.mean(pred_i)),
                    "len_idle_meas": float(np.mean(meas_i)),
                    "slot_idle_sim": idle_sim,
                    "n_steps": len(per_step),
                }
            )
    return pl.DataFrame(rows).sort("tau", "mean_G", maintain_order=True)
