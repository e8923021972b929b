"""The whole verl step predicted on runs a calibration never saw.

For each step of a held-out run the step model composes, as the synchronous pipeline does
(:mod:`sim.pipelines.sync`, :mod:`sim.models.step_phases`):

``step = gen + learner + reward wait (+ advantage) + periodic + weight sync``

* ``gen``: the SimPy engine on lengths drawn to match that step's logged statistics
  (:func:`calibration.validation.verl_holdout.simulate_step`, mean over the draws), plus
  the fitted per-phase overhead;
* ``learner``: the fitted learner cost at the step's logged ``perf/total_num_tokens``;
* reward wait: :func:`sim.models.step_phases.extra_step_s` with the rollouts' finish
  times of the first draw;
* periodic: the calibrated validation and checkpoint phases at their period;
* sync: the fitted weight sync.

Baselines, fitted on the calibration runs' steps (stored in the calibration under
``fit.step_baselines``): ``constant`` (their median step) and ``linear``
(:func:`calibration.fits.phase_fit.baseline_design`); and ``persistence`` (the held-out
run's previous logged step: it reads the held-out run itself, so it is labelled apart).
Errors: ``ape_t = |pred_t / step_t - 1|``; the median and the mean over the scored steps,
over all of them and over the steps where no periodic phase runs.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from rolloutlab.calibration.fits.phase_fit import (
    STEP_PARTS,
    STEP_TAG,
    baseline_design,
    part_seconds,
)
from rolloutlab.calibration.fits.verl_fit import TOKENS_TAG, VerlFitConfig
from rolloutlab.calibration.scenarios.verl import load_runs
from rolloutlab.calibration.validation.verl_holdout import simulate_step
from rolloutlab.sim.models.step_phases import StepPhases, extra_step_s
from rolloutlab.sim.scenario.scenario import Scenario

RULES = ("model", "constant", "linear", "persistence")
SUMMARY_COLUMNS = [
    "run",
    "steps",
    "rule",
    "median_ape",
    "mape",
    "median_ape_plain",
    "mape_plain",
]


def predict_step(
    scenario: Scenario, draw, B: int, tokens: float, cfg: VerlFitConfig
) -> tuple[float, dict]:
    """Whole-step time (s) of one logged step and its parts (module docstring).

    ``draw``: the step's :class:`calibration.fits.cost_fit.StepDraw`; ``B``: prompts;
    ``tokens``: prompt + response tokens of the batch."""
    cost = scenario.cost
    gen, t_fin = simulate_step(
        draw, B, cfg, cost, scenario.engine, scenario.lengths.max_response_length
    )
    learner = float(cost.learner_step_s(tokens))
    phases = scenario.step_phases or StepPhases()
    # logged step s is verl's global step s (1-based): the simulator's step s - 1
    wait, periodic = extra_step_s(phases, draw.step - 1, cfg.seed, t_fin, gen, learner)
    sync = cost.weight_sync_s()
    parts = {
        "gen": gen,
        "learner": learner,
        "reward_wait": wait,
        "periodic": periodic,
        "sync": sync,
    }
    return gen + learner + wait + periodic + sync, parts


def heldout_steps(
    scenario: Scenario,
    run_dirs: list[str],
    cfg: VerlFitConfig,
    after_step: int = 0,
    progress=None,
) -> pl.DataFrame:
    """One row per scored step of each run: ``run, step, measured_s, model_s, constant_s,
    linear_s, persistence_s, periodic``, the model's parts (``gen_s, learner_s,
    reward_wait_s, periodic_s, sync_s``), and per part of
    :data:`calibration.fits.phase_fit.STEP_PARTS` the measured seconds
    (``measured_<part>_s``) and the naive rules' (``constant_<part>_s``,
    ``linear_<part>_s`` from ``fit.step_baselines.parts``, null when the calibration
    predates them; ``persistence_<part>_s``, the previous logged step). Only logged steps above ``after_step`` are
    scored, and of a run the calibration read only the steps after the last it fitted
    (``calibrate verl-tb --fit-steps``): a within-run hold-out.

    Raises ValueError when the calibration has no ``fit.step_baselines`` (not written by
    ``calibrate verl-tb``), fitted every step of a given run, or a run has no step with
    ``timing_s/step``;
    :class:`calibration.readers.verl_tb.VerlLogError` on bad logs.
    """
    base = scenario.source.get("fit", {}).get("step_baselines")
    if base is None:
        raise ValueError(
            f"calibration {scenario.name!r} has no fit.step_baselines: "
            "make it with `rolloutlab calibrate verl-tb`"
        )
    fitted = {r["run"]: r for r in scenario.source.get("fit", {}).get("runs", [])}
    rows = []
    for name, files, data in load_runs(run_dirs, cfg):
        run_after = after_step
        if name in fitted:  # a run the calibration read: only the steps it did not fit
            if scenario.source.get("provenance", {}).get("fit_steps") is None:
                raise ValueError(
                    f"{files[0]}: the calibration fitted every step of run {name!r}, so "
                    "nothing of it is held out (score another run, or calibrate with --fit-steps)"
                )
            run_after = max(after_step, int(fitted[name]["last_fitted_step"]))
        table = data.table
        if STEP_TAG not in table.columns:
            raise ValueError(f"{files[0]}: no {STEP_TAG!r} tag: nothing to score")
        step_s = table[STEP_TAG].to_numpy()
        X = baseline_design(table)  # (n_steps, 3)
        linear = X @ np.asarray(base["linear_coef"])
        part_s = {part: part_seconds(table, part) for part in STEP_PARTS}  # (n_steps,) each
        part_base = base.get("parts") or {}  # absent in calibrations made before it
        part_linear = {part: X @ np.asarray(b["linear_coef"]) for part, b in part_base.items()}
        periodic_steps = {
            int(s)
            for tag in ("timing_s/testing", "timing_s/save_checkpoint")
            if tag in table.columns
            for s in table.filter(pl.col(tag).is_not_null())["step"].to_list()
        }
        prev = prev_i = None
        for i, draw in enumerate(data.draws):
            B = int(data.n[i]) // cfg.group_size
            y = step_s[i]
            if y is None or not np.isfinite(y) or y <= 0:
                prev = prev_i = None
                continue
            if draw.step <= run_after:
                prev, prev_i = float(y), i
                continue
            pred, parts = predict_step(scenario, draw, B, float(table[TOKENS_TAG][i]), cfg)
            by_part: dict[str, float | None] = {
                f"measured_{part}_s": float(part_s[part][i]) for part in STEP_PARTS
            }
            for part in STEP_PARTS:
                b = part_base.get(part)
                by_part[f"constant_{part}_s"] = None if b is None else float(b["constant_s"])
                by_part[f"linear_{part}_s"] = None if b is None else float(part_linear[part][i])
                by_part[f"persistence_{part}_s"] = (
                    None if prev_i is None else float(part_s[part][prev_i])
                )
            rows.append(
                {
                    "run": name,
                    "step": int(draw.step),
                    "measured_s": float(y),
                    "model_s": pred,
                    "constant_s": float(base["constant_s"]),
                    "linear_s": float(linear[i]),
                    "persistence_s": prev,
                    "periodic": int(draw.step) in periodic_steps,
                    **{f"{k}_s": v for k, v in parts.items()},
                    **by_part,
                }
            )
            prev, prev_i = float(y), i
        if progress is not None:
            progress(name)
    if not rows:
        raise ValueError(f"{', '.join(run_dirs)}: no step has a positive {STEP_TAG!r}")
    return pl.DataFrame(rows)


PART_RULES = ("constant", "linear", "persistence")
"""The naive rules scored per part beside the model (:func:`heldout_steps`)."""


def part_shares(steps: pl.DataFrame) -> pl.DataFrame:
    """Per run and part of the step (:data:`calibration.fits.phase_fit.STEP_PARTS` and
    ``sync``): the mean seconds per scored step, measured and predicted, each as a share
    of its step (measured: of ``timing_s/step``; predicted: of the predicted step), and
    the mean absolute error per step, s, of the model (``mae_model``) and of each of
    :data:`PART_RULES` (``mae_<rule>``; null where the calibration has no per-part
    baselines, persistence over the steps with a previous step). ``sync`` has no
    measured tag, so no error."""
    out = []
    for (run,), g in steps.group_by("run", maintain_order=True):
        total_m, total_p = float(g["measured_s"].sum()), float(g["model_s"].sum())
        for part in (*STEP_PARTS, "sync"):
            m = float(g[f"measured_{part}_s"].mean()) if part in STEP_PARTS else None
            p = float(g[f"{part}_s"].mean())
            row = {
                "run": run,
                "part": part,
                "measured_s": m,
                "model_s": p,
                "measured_share": None if m is None else m * g.height / total_m,
                "model_share": p * g.height / total_p,
                "mae_model": _mae(g, f"{part}_s", part),
            }
            for rule in PART_RULES:
                row[f"mae_{rule}"] = _mae(g, f"{rule}_{part}_s", part)
            out.append(row)
    floats = ["measured_s", "measured_share", "mae_model", *(f"mae_{r}" for r in PART_RULES)]
    return pl.DataFrame(out, schema_overrides={c: pl.Float64 for c in floats})


def _mae(g: pl.DataFrame, col: str, part: str) -> float | None:
    """Mean ``|g[col] - measured part|`` over the rows where ``col`` is not null; None
    where the part has no measured tag, the column is absent or all null."""
    measured = f"measured_{part}_s"
    if part not in STEP_PARTS or col not in g.columns:
        return None
    sub = g.drop_nulls(col)
    if sub.height == 0:
        return None
    return float((sub[col] - sub[measured]).abs().mean())


def score(steps: pl.DataFrame) -> pl.DataFrame:
    """Per run and rule: median and mean APE over all scored steps and over the steps
    without a periodic phase (``_plain``); persistence over the steps that have a
    previous step. Columns :data:`SUMMARY_COLUMNS`."""
    out = []
    for (run,), g in steps.group_by("run", maintain_order=True):
        for rule in RULES:
            sub = g.drop_nulls(f"{rule}_s")
            ape = (sub[f"{rule}_s"] / sub["measured_s"] - 1).abs()
            plain = ape.filter(~sub["periodic"])
            out.append(
                {
                    "run": run,
                    "steps": sub.height,
                    "rule": rule,
                    "median_ape": float(ape.median()),
                    "mape": float(ape.mean()),
                    "median_ape_plain": float(plain.median()) if plain.len() else None,
                    "mape_plain": float(plain.mean()) if plain.len() else None,
                }
            )
    return pl.DataFrame(
        out, schema_overrides={"median_ape_plain": pl.Float64, "mape_plain": pl.Float64}
    )


def fit_config(scenario: Scenario) -> VerlFitConfig:
    """The :class:`VerlFitConfig` a verl-tb calibration was made with (its
    ``provenance.assumptions``: G, cap, ICC, draws, seed), for predicting other runs
    the way it fitted its own. Raises ValueError for a calibration without them."""
    a = scenario.source.get("provenance", {}).get("assumptions")
    if not a or "group_size" not in a:
        raise ValueError(
            f"calibration {scenario.name!r}: no verl-tb assumptions (make it with "
            "`rolloutlab calibrate verl-tb`)"
        )
    return VerlFitConfig(
        group_size=int(a["group_size"]),
        max_response_length=int(a["max_response_length"]),
        engine=scenario.engine,
        replicates=int(a["replicates"]),
        seed=int(a["seed"]),
        icc=float(a["icc"]),
    )
