"""The simulator's cost model of the machine a traced synchronous run ran on: a
calibration JSON whose ``cost`` and ``engine`` blocks come from the run's own steps.

- Decode and prefill (``a_s, b_s, c_s, prefill_s_per_token``): :func:`analysis.idle.finish_fit.
  fit_finish_times` on every step's rollout finish times (the fit ``compare idle`` makes on
  its fit steps; slowed steps trimmed the same way).
- ``gen_overhead_s``: the median over those steps of the measured generation phase
  (``gen_time``) minus the fitted engine's makespan of the step's measured lengths
  (request set-up, output conversion: what the engine iterations do not explain), >= 0.
- Learner: ``train_time = learner_const_s + learner_s_per_token * tokens`` by non-negative
  least squares over the steps, ``tokens`` the prompt + response tokens of all the step's
  rollouts (what the simulator's learner is priced on, :mod:`sim.models.cost`; a step whose
  groups dynamic sampling all dropped trains on none and costs little, so the slope is an
  average over kept and dropped groups). When the steps do not identify the per-token slope
  (its OLS t statistic below :data:`MIN_SLOPE_T`, as in a run at one ``(G, B)`` whose tokens
  vary little), the learner is priced through the origin instead, ``learner_s_per_token =
  sum train_time / sum tokens`` and ``learner_const_s = 0``, so a simulated step at another
  ``G`` or ``B`` pays for its tokens (:func:`calibration.fits.cost_fit.fit_learner`).
- ``sync_s``: the median ``sync_time``.

Times are the run's wall clock (``steps`` table ``gen_time``, ``train_time``, ``sync_time``
and the rollouts' ``t_finish``): on a shared machine they carry its load, which is why the
fit reports its relative error and the steps it trimmed.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
from rolloutlab.analysis.idle.finish_fit import fit_finish_times, simulate_step
from rolloutlab.analysis.inputs.run_input import RunData, RunInputError, step_layouts
from rolloutlab.calibration.fits.cost_fit import fit_learner

MIN_SLOPE_T = 2.0
"""A per-token learner slope whose OLS t statistic is below this is not identified (the
usual two-standard-error rule)."""


def run_cost(run: RunData, min_slope_t: float | None = MIN_SLOPE_T) -> tuple[dict, dict, dict]:
    """``(cost, engine, fit)`` blocks of a calibration (module docstring) for ``run``.

    ``engine``: one block of :class:`sim.engine.core.EngineConfig` fields: the run's workers
    and slots, prefix caching as the run's engine had it (vLLM: on).
    Raises: :class:`analysis.inputs.run_input.RunInputError` when the steps table lacks a
    phase column, fewer than 2 steps exist or the run batched statically; ValueError
    from the finish-time fit.
    """
    if run.batching != "continuous":
        raise RunInputError(
            f"{run.path}: batched {run.batching!r}; a calibration's engine batches "
            "continuously, so its cost is not fitted to a statically batched run"
        )
    vllm = run.config.get("config", run.config).get("engine") == "vllm"
    engine = dataclasses.replace(run.engine, prefix_caching=vllm)
    layouts = step_layouts(run)
    if len(layouts) < 2:
        raise RunInputError(f"{run.path}: {len(layouts)} step(s); a cost fit needs >= 2")
    missing = [c for c in ("gen_time", "train_time", "sync_time") if c not in run.steps.columns]
    if missing:
        raise RunInputError(f"{run.path}: steps table has no {', '.join(missing)}")
    fit = fit_finish_times(layouts, engine)
    steps = run.steps.sort("step")
    by_step = {int(s): i for i, s in enumerate(steps["step"].to_list())}
    gen = steps["gen_time"].to_numpy()
    engine_s = np.array(
        [
            simulate_step(lay.lengths, lay.prompt_tokens, fit, engine)[2].max() - fit.submit_delay_s
            for lay in layouts
        ]
    )
    at = np.array([by_step[lay.step] for lay in layouts])
    overhead = max(0.0, float(np.median(gen[at] - engine_s)))
    tokens = (
        run.rollouts.group_by("step")
        .agg((pl.col("prompt_tokens") + pl.col("response_tokens")).sum().alias("tokens"))
        .sort("step")
    )
    tok = np.array(
        [tokens.filter(pl.col("step") == s)["tokens"].item() for s in steps["step"].to_list()],
        dtype=float,
    )
    train = steps["train_time"].to_numpy()
    learner = fit_learner(tok, train, steps["sync_time"].to_numpy(), min_slope_t=min_slope_t)
    pred = learner.learner_const_s + learner.learner_s_per_token * tok
    cost = {
        **fit.cost.to_dict(),
        "learner_const_s": learner.learner_const_s,
        "learner_s_per_token": learner.learner_s_per_token,
        "sync_s": learner.sync_s,
        "gen_overhead_s": overhead,
    }
    with np.errstate(divide="ignore", invalid="ignore"):
        learner_mape = float(np.nanmean(np.abs(pred / train - 1.0)))
    fit_block = {
        "method": "run-cost: decode NNLS on rollout finish times, learner NNLS on step tokens "
        "(through the origin when the slope is not identified)",
        "decode": fit.to_dict(),
        "gen_overhead_s_spread": [
            float(np.min(gen[at] - engine_s)),
            float(np.max(gen[at] - engine_s)),
        ],
        "learner_mape": learner_mape,
        "learner_rule": learner.rule,
        # strict JSON: nan (slope not computable) and inf (exact line) are written as null
        "learner_slope_t": learner.slope_t if np.isfinite(learner.slope_t) else None,
        "learner_tokens_cv": learner.tokens_cv,
        "learner_why": learner.why(),
        "steps": len(layouts),
        "clock": "wall",
    }
    return cost, dataclasses.asdict(engine), fit_block
