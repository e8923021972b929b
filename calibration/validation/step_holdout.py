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
from rolloutlab.calibration.fits.phase_fit import STEP_TAG, baseline_design
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
    linear_s, persistence_s, periodic`` and the model's parts (``gen_s, learner_s,
    reward_wait_s, periodic_s, sync_s``). Only logged steps above ``after_step`` are
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
        periodic_steps = {
            int(s)
            for tag in ("timing_s/testing", "timing_s/save_checkpoint")
            if tag in table.columns
            for s in table.filter(pl.col(tag).is_not_null())["step"].to_list()
        }
        prev = None
        for i, draw in enumerate(data.draws):
            B = int(data.n[i]) // cfg.group_size
            y = step_s[i]
            if y is None or not np.isfinite(y) or y <= 0:
                prev = None
                continue
            if draw.step <= run_after:
                prev = float(y)
                continue
            pred, parts = predict_step(scenario, draw, B, float(table[TOKENS_TAG][i]), cfg)
            measured = {
                f"measured_{part}_s": float(sum(_tag(table, t, i) for t in tags))
                for part, tags in MEASURED_PARTS.items()
            }
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
                    **measured,
                }
            )
            prev = float(y)
        if progress is not None:
            progress(name)
    if not rows:
        raise ValueError(f"{', '.join(run_dirs)}: no step has a positive {STEP_TAG!r}")
    return pl.DataFrame(rows)


MEASURED_PARTS = {
    "gen": ("gen",),
    "learner": ("old_log_prob", "ref", "update_actor"),
    "reward_wait": ("reward", "adv"),
    "periodic": ("testing", "save_checkpoint"),
}
"""The model's parts and the verl phases (``timing_s/*``) each one prices; the weight
sync has no tag of its own (verl times ``reshard`` inside ``gen``)."""


def _tag(table: pl.DataFrame, name: str, i: int) -> float:
    """``timing_s/name`` at row ``i`` (0 when not logged there)."""
    col = f"timing_s/{name}"
    if col not in table.columns or table[col][i] is None:
        return 0.0
    return float(table[col][i])


def part_shares(steps: pl.DataFrame) -> pl.DataFrame:
    """Per run and part of the step (:data:`MEASURED_PARTS` and ``sync``): the mean
    seconds per scored step, measured and predicted, and each as a share of its step
    (measured: of ``timing_s/step``; predicted: of the predicted step)."""
    out = []
    for (run,), g in steps.group_by("run", maintain_order=True):
        total_m, total_p = float(g["measured_s"].sum()), float(g["model_s"].sum())
        for part in (*MEASURED_PARTS, "sync"):
            m = float(g[f"measured_{part}_s"].mean()) if part in MEASURED_PARTS else None
            p = float(g[f"{part}_s"].mean())
            out.append(
                {
                    "run": run,
                    "part": part,
                    "measured_s": m,
                    "model_s": p,
                    "measured_share": None if m is None else m * g.height / total_m,
                    "model_share": p * g.height / total_p,
                }
            )
    return pl.DataFrame(
        out, schema_overrides={"measured_s": pl.Float64, "measured_share": pl.Float64}
    )


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
