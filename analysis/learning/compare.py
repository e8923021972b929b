"""Predicted against measured time-to-target of real runs (``rolloutlab compare learning``).

One real run, or several seeds of one setting (``--fit``), calibrate the simulator's
learning model (:func:`calibration.fits.learning_fit.fit_learning`: kappa, the initial Beta
pass rates and, with the default ``saturating`` model, the shift's capacity theta_max)
and a per-step cost model; each run is then predicted from its own settings and compared
with what it measured:

- **reward**: runs drawn from the fitted model (:mod:`calibration.fits.learning_draws`)
  driven by the run's own per-step G, B and lr (for an adaptive controller: the G it
  actually chose, not a re-simulated controller: **simplification**); the mean-field
  curve (:func:`calibration.fits.learning_fit.mean_field_curve`) is drawn in the figure;
- **step time**: ``t_step = c0 + c1 * (B * G)^p`` (s; :mod:`analysis.learning.step_cost`: ``p`` = 1
  and ``c1`` the fit runs' generation + training time over their rollouts when they hold
  one rollout count, ``c1`` and ``p`` a log-log least-squares fit across two or more).
  ``clock="cpu"`` takes the process CPU time of each step's phases
  (learner.jsonl) instead of wall time: on a shared machine the wall clock of identical
  work varies with the load, which no model of the run can predict;
- **time to target**: :func:`sim.models.learning.time_to_target` (first step where the trailing
  mean of ``reward_mean`` over 10 steps >= target) on the measured steps table; the
  prediction is the **median over the drawn runs** of the same statistic. The statistic
  of a noisy run is a first passage: near a plateau the noise crosses the target long
  before the mean curve does, so applying it to the mean-field curve (column
  ``mean_field_time_to_target_s``) is biased late (by +50-80 % on the graph-walk runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from rolloutlab.analysis.inputs.run_input import CLOCKS, cpu_phases
from rolloutlab.analysis.learning.directions import directions_of
from rolloutlab.analysis.learning.heldout import (
    eval_rows,
    eval_size,
    measured_heldout,
    predicted_heldout,
    started_above,
)
from rolloutlab.analysis.learning.progress import load_runs
from rolloutlab.analysis.learning.resim import (
    resimulate,
    resimulated_rows,
    run_config,
    step_lengths,
)
from rolloutlab.analysis.learning.seeds import group_labels, group_table, ranks
from rolloutlab.analysis.learning.step_cost import (
    Cost,
    extrapolation_notes,
    pooled_cost,
    step_clock,
)
from rolloutlab.analysis.learning.step_cost_law import fit_law, read_steps, step_clock_law
from rolloutlab.calibration.fits.learning_draws import draw_rewards
from rolloutlab.calibration.fits.learning_fit import fit_learning, mean_field_curve
from rolloutlab.calibration.fits.learning_noise_fit import fit_noise_law, settings
from rolloutlab.calibration.readers.run_curve import RunCurve, read_run
from rolloutlab.sim.models.learning import LearningParams, time_to_target
from rolloutlab.sim.scenario.provenance import write_config
from rolloutlab.sim.trace import schema as trace
from rolloutlab.sim.trace import strict_json
from rolloutlab.sim.trace.progress import phase

WINDOW = 10
"""Steps in the trailing reward mean of :func:`sim.models.learning.time_to_target`."""

TARGETS = ("train", "heldout")
"""What ``--target-accuracy`` scores: the trailing training reward, or held-out accuracy."""

COST_LAWS = ("power", "mechanism")
"""How a step is priced: ``c0 + c1 (B G)^p``, or :mod:`analysis.learning.step_cost_law`."""
LAW_DRAWS = 20
"""Feature draws per step of the mechanism law (its validation's, results/step_cost_law)."""


def run_steps(run_dir: Path, clock: str = "wall") -> pl.DataFrame:
    """The run's steps table; with ``clock="cpu"`` its times are CPU seconds: phases from
    learner.jsonl, ``t_end`` their running sum (time between steps, evaluations, not
    counted). Raises ValueError naming a run without the table or the CPU fields."""
    for suffix in (".parquet", ".jsonl"):
        p = Path(run_dir) / f"steps{suffix}"
        if p.exists():
            steps = trace.read(p, "steps").sort("step")
            break
    else:
        raise ValueError(f"{run_dir}: no steps.parquet or steps.jsonl")
    if clock == "wall":
        return steps
    gen, train, sync = cpu_phases(run_dir, steps.height).values()
    end = np.cumsum(gen + train + sync)
    return steps.with_columns(
        pl.Series("t_start", end - gen - train - sync),
        pl.Series("t_end", end),
        pl.Series("gen_time", gen),
        pl.Series("train_time", train),
        pl.Series("sync_time", sync),
    )


def _beta(fit: dict) -> tuple[float, float]:
    a, b = fit["fit"]["init_pass_rate"]["spec"].split(":")[1].split(",")
    return float(a), float(b)


def _params(fit: dict) -> LearningParams:
    return LearningParams.from_dict(fit)


def predict(
    fit: dict, curve: RunCurve, cost: Cost, t_end: np.ndarray | None = None
) -> pl.DataFrame:
    """Mean-field prediction ``step, t_end (s), reward_mean`` of a run with ``curve``'s
    settings (:func:`calibration.fits.learning_fit.mean_field_curve`; drawn in the figure);
    ``t_end`` (T,) the predicted clock, default ``cost``'s (:func:`step_clock`)."""
    p = _params(fit)
    reward = mean_field_curve(
        p.kappa, *_beta(fit), curve, p.lr_ref, p.theta_max, p.b_noise, p.advantage, p.rho
    )
    return pl.DataFrame(
        {
            "step": np.arange(len(reward)),
            "t_end": step_clock(curve, cost) if t_end is None else t_end,
            "reward_mean": reward,
        }
    )


def first_passage(fit: dict, curve: RunCurve, target: float, draws: int, seed: int) -> np.ndarray:
    """(draws,) steps to target (counted from 1; NaN = never) of ``draws`` runs drawn from
    the fitted model at ``curve``'s G, lr and B
    (:func:`calibration.fits.learning_draws.draw_rewards`), each scored like the measured run
    (trailing mean of :data:`WINDOW` steps, full windows; module docstring)."""
    B = np.array([c.size for c in curve.counts])
    reward = draw_rewards(
        _params(fit), *_beta(fit), curve.G, curve.lr, B, curve.dynamic_sampling, draws,
        np.random.default_rng(seed),
    )  # fmt: skip
    c = np.cumsum(np.pad(reward, ((0, 0), (1, 0))), axis=1)
    trail = (c[:, WINDOW:] - c[:, :-WINDOW]) / WINDOW  # (draws, T - W + 1)
    hit = trail >= target - 1e-12
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + WINDOW, np.nan)


def _median(steps: np.ndarray) -> int | None:
    """Median of (n,) steps to target, NaN = never (sorted last); None when over half never."""
    med = float(np.median(np.where(np.isnan(steps), np.inf, steps)))
    return None if not np.isfinite(med) else int(np.ceil(med))


def _step_at(steps: pl.DataFrame, t: float | None) -> int | None:
    """The step whose ``t_end`` is ``t`` (time_to_target's hit), counted from 1."""
    if t is None:
        return None
    return int(steps.sort("t_end")["t_end"].search_sorted(t)) + 1


def _heldout(fit, run_dir, measured, predicted, curve, target, draws, seed) -> tuple:
    """The held-out variant of one run's row (:mod:`analysis.learning.heldout`): measured
    (time, steps), the drawn steps to target, the mean-field time, and the figure's
    (measured, predicted) evaluation points."""
    evals = eval_rows(run_dir).filter(pl.col("step") < curve.G.size)
    m, m_step = measured_heldout(evals, measured, target)
    at = evals.filter(pl.col("step") >= 0)["step"].to_numpy()
    drawn, median = predicted_heldout(
        _params(fit), _beta(fit), curve, at, target, draws, seed, eval_size(run_dir)
    )
    t_pred, mf_acc = predicted["t_end"].to_numpy(), predicted["reward_mean"].to_numpy()[at]
    mf_hit = np.flatnonzero(mf_acc >= target - 1e-12)
    mf = float(t_pred[at[mf_hit[0]]]) if mf_hit.size else None
    t_meas = measured.sort("step")["t_end"].to_numpy()
    pair = (
        pl.DataFrame({"step": at, "t_end": t_meas[at], "reward_mean": evals.filter(
            pl.col("step") >= 0)["accuracy"].to_numpy()}),
        pl.DataFrame({"step": at, "t_end": t_pred[at], "reward_mean": median}),
    )  # fmt: skip
    return m, m_step, drawn, mf, pair


def fit_steps_to_target(
    fit_dirs: list[Path], target: float, clock: str, target_on: str
) -> float | None:
    """The fit runs' mean measured steps to ``target`` (over those that reach it; None when
    none does), scored as the predicted runs are: the naive rule "every setting takes the
    fit runs' steps" that the law's prediction stands beside (column
    ``constant_steps_time_to_target_s``: those steps priced on each run's predicted clock,
    so the rule and the law share the cost model and differ only in steps)."""
    steps = []
    for d in fit_dirs:
        measured = run_steps(d, clock)
        if target_on == "heldout":
            _, s = measured_heldout(eval_rows(d), measured, target)
        else:
            s = _step_at(measured, time_to_target(measured, target, WINDOW))
        if s is not None:
            steps.append(s)
    return float(np.mean(steps)) if steps else None


def compare_learning(
    fit_dir: Path | list[Path],
    run_dirs: list[Path],
    target: float,
    model: str = "saturating",
    draws: int = 200,
    seed: int = 0,
    clock: str = "wall",
    resim_draws: int = 0,
    target_on: str = "train",
    cost_dirs: list[Path] | None = None,
    cost_law: str = "power",
) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, tuple[pl.DataFrame, pl.DataFrame]], dict]:
    """``(table, groups, curves, fit)``: one row per run of ``run_dirs`` (columns of
    ``learning_comparison.csv``: ``run, controller, measured/predicted_time_to_target_s,
    rel_error, measured/predicted_rank``, then ``seed, group,
    measured/predicted_steps_to_target, predicted_sd_s, predicted_reached_frac,
    mean_field_time_to_target_s``), one row per controller and settings over its seeds
    (:func:`analysis.learning.seeds.group_table`), per run ``(measured steps, mean-field
    predicted steps)``, and the fitted learning block with the cost model.

    ``fit_dir``: one run, or several (seeds of one setting) fitted jointly
    (:func:`calibration.fits.learning_fit.fit_learning`), the cost model then the mean of
    theirs; runs at two or more (G, B) settings fit the noise law instead
    (:func:`calibration.fits.learning_noise_fit.fit_noise_law`, std advantage as the real
    learner normalises by the group std).

    ``model``: the learning model's shape (:data:`calibration.fits.learning_fit.MODELS`);
    ``draws``, ``seed``: the runs drawn per prediction (the same seed for every run:
    common random numbers); ``clock``: :data:`CLOCKS`; ``resim_draws`` > 0: every
    adaptive (not ``static:``) run is also predicted with its controller re-simulated
    (:mod:`analysis.learning.resim`, that many draws; columns ``resim_*``). The predicted time to target is
    the median over the draws (None when more than half never reach it).

    ``cost_dirs``: runs whose steps price the step cost instead of the fit runs' (the law
    is still fitted on ``fit_dir``): runs made on the machine, and in the machine state,
    of the runs predicted. A CPU clock is not portable between sessions of a shared
    machine (docs/learning.md §5: the same settings ran 30-50 % cheaper per step in a
    later session), so a law fitted on older runs is priced with newer ones.

    ``cost_law``: ``"power"`` prices a step ``c0 + c1 (B G)^p`` (module docstring);
    ``"mechanism"`` with the step-cost law of :mod:`analysis.learning.step_cost_law`
    (engine calls, decoded rows, attended cache, prefill tokens, trained cells; fitted on
    the priced runs, each run's settings' features drawn from theirs at its engine
    capacity): validated across rollout counts on CPU time only (docs/learning.md §5), so
    it needs ``clock="cpu"``, and not with ``resim_draws`` (the re-simulation prices by
    the power law).

    ``target_on``: ``"train"`` scores the trailing training reward (module docstring);
    ``"heldout"`` the runs' held-out evaluations (:mod:`analysis.learning.heldout`: the
    first evaluation at or above the target, predicted by the drawn runs' population pass
    rate at the same steps; the curves then hold evaluation points, ``reward_mean`` their
    accuracy).

    Raises: ValueError (``RunDataError``, ``ProgressError``) naming a run that cannot be
    read (with ``heldout``: its ``eval.jsonl``), runs of different tasks, a target outside
    (0, 1], an unknown model, clock or ``target_on``, or (clock cpu) a run without the CPU
    fields.
    """
    if target_on not in TARGETS:
        raise ValueError(f"target_on: expected one of {TARGETS}, got {target_on!r}")
    if not 0 < target <= 1:
        raise ValueError(f"--target-accuracy must be in (0, 1], got {target}")
    fit_dirs = [fit_dir] if isinstance(fit_dir, str | Path) else list(fit_dir)
    runs, _, _ = load_runs([*fit_dirs, *run_dirs])  # same task, readable
    fit_curves = [read_run(d) for d in fit_dirs]
    if clock not in CLOCKS:
        raise ValueError(f"clock: expected one of {CLOCKS}, got {clock!r}")
    if cost_law not in COST_LAWS:
        raise ValueError(f"cost_law: expected one of {COST_LAWS}, got {cost_law!r}")
    if cost_law == "mechanism" and (clock != "cpu" or resim_draws > 0):
        raise ValueError("--cost-law mechanism prices CPU seconds only (--clock cpu) and "
                         "does not price --resimulate")  # fmt: skip
    if len(settings(fit_curves)) >= 2:  # the noise law (b_noise) needs >= 2 (G, B) settings
        fit = fit_noise_law(fit_curves, model=model, advantage="std")
    else:
        fit = fit_learning(fit_curves, model=model)
    priced = list(cost_dirs) if cost_dirs else fit_dirs
    priced_curves = [read_run(d) for d in cost_dirs] if cost_dirs else fit_curves
    cost = pooled_cost([run_steps(d, clock) for d in priced], priced_curves)
    law_runs = [read_steps(d) for d in priced] if cost_law == "mechanism" else []
    law = fit_law(law_runs) if law_runs else None
    fit_lengths = step_lengths(fit_dirs[0]) if resim_draws > 0 else []
    naive_steps = fit_steps_to_target(fit_dirs, target, clock, target_on)
    rows, curves = [], {}
    controllers = runs["controller"].to_list()[len(fit_dirs) :]
    labels = group_labels(list(run_dirs), controllers)
    for d, ctl, seed_, label in zip(
        run_dirs, controllers, runs["seed"].to_list()[len(fit_dirs) :], labels, strict=True
    ):
        measured, curve = run_steps(d, clock), read_run(d)
        t_end = None
        if law is not None:
            B = np.array([c.size for c in curve.counts])
            capacity = run_config(d).get("capacity")
            if capacity is None:
                raise ValueError(f"{Path(d) / 'config.json'}: no capacity (engine slots), "
                                 "which --cost-law mechanism prices")  # fmt: skip
            t_end = step_clock_law(law, law_runs, curve.G, B, int(capacity), LAW_DRAWS, seed)
        predicted = predict(fit, curve, cost, t_end)
        curves[Path(d).name] = (measured, predicted)
        t_pred = predicted["t_end"].to_numpy()
        if target_on == "heldout":
            m, m_step, drawn, mf, curves[Path(d).name] = _heldout(
                fit, d, measured, predicted, curve, target, draws, seed
            )
        else:
            m = time_to_target(measured, target, WINDOW)
            m_step, mf = _step_at(measured, m), time_to_target(predicted, target, WINDOW)
            drawn = first_passage(fit, curve, target, draws, seed)
        p_step = _median(drawn)
        p = None if p_step is None else float(t_pred[p_step - 1])
        reached = drawn[~np.isnan(drawn)].astype(int)
        resim = {"resim_time_to_target_s": None, "resim_steps_to_target": None,
                 "resim_mean_G": None}  # fmt: skip
        if resim_draws > 0 and not ctl.startswith("static:"):
            sim = resimulate(
                _params(fit), _beta(fit), ctl, run_config(d), curve, fit_lengths, cost,
                resim_draws, seed,
            )  # fmt: skip
            resim = resimulated_rows(*sim, target, WINDOW)
        rows.append(
            {
                "run": Path(d).name,
                "controller": ctl,
                "measured_time_to_target_s": m,
                "predicted_time_to_target_s": p,
                "rel_error": None if m is None or p is None else (p - m) / m,
                "seed": seed_,
                "group": label,
                "measured_steps_to_target": m_step,
                "predicted_steps_to_target": p_step,
                "predicted_sd_s": float(np.std(t_pred[reached - 1])) if reached.size > 1 else None,
                "predicted_reached_frac": reached.size / draws,
                "mean_field_time_to_target_s": mf,
                **resim,
                **_naive(naive_steps, t_pred, m),
            }
        )
    table = pl.DataFrame(
        rows,
        schema_overrides={
            "rel_error": pl.Float64,
            "measured_time_to_target_s": pl.Float64,
            "predicted_time_to_target_s": pl.Float64,
            "measured_steps_to_target": pl.Int64,
            "predicted_steps_to_target": pl.Int64,
            "predicted_sd_s": pl.Float64,
            "mean_field_time_to_target_s": pl.Float64,
            "resim_time_to_target_s": pl.Float64,
            "resim_steps_to_target": pl.Int64,
            "resim_mean_G": pl.Float64,
            "constant_steps_time_to_target_s": pl.Float64,
            "constant_rel_error": pl.Float64,
        },
    )
    groups = group_table(table)
    table = table.with_columns(
        pl.Series("measured_rank", ranks(table["measured_time_to_target_s"].to_list())),
        pl.Series("predicted_rank", ranks(table["predicted_time_to_target_s"].to_list())),
    ).select(
        "run", "controller", "measured_time_to_target_s", "predicted_time_to_target_s",
        "rel_error", "measured_rank", "predicted_rank", "seed", "group",
        "measured_steps_to_target", "predicted_steps_to_target", "predicted_sd_s",
        "predicted_reached_frac", "mean_field_time_to_target_s",
        *(["resim_time_to_target_s", "resim_steps_to_target", "resim_mean_G"] if resim_draws else []),
        "constant_steps_time_to_target_s", "constant_rel_error",
    )  # fmt: skip
    extra = {"cost_c0_s": cost[0], "cost_c1_s_per_rollout": cost[1], "cost_exponent": cost[2],
             "cost_law": cost_law,
             **({"cost_law_coefficients": {"gen": law.gen, "train": law.train,
                                           "sync_s": law.sync_s}} if law else {}),
             "clock": clock,
             "draws": draws, "draw_seed": seed, "target_on": target_on,
             "cost_runs": [str(d) for d in priced],
             "constant_steps_to_target": naive_steps}  # fmt: skip
    return table, groups, curves, {**fit, **extra}


def _naive(steps: float | None, t_pred: np.ndarray, measured: float | None) -> dict:
    """The constant-steps rule's columns for one run (:func:`fit_steps_to_target`)."""
    if steps is None:
        return {"constant_steps_time_to_target_s": None, "constant_rel_error": None}
    k = min(int(round(steps)), t_pred.size)
    t = float(t_pred[k - 1])
    err = None if measured is None else (t - measured) / measured
    return {"constant_steps_time_to_target_s": t, "constant_rel_error": err}


def comparison_figure(
    curves: dict[str, tuple[pl.DataFrame, pl.DataFrame]],
    target: float,
    path: str | Path,
    clock: str = "wall",
    target_on: str = "train",
) -> None:
    """One panel per run (up to 5 a row): measured and predicted reward (trailing mean of :data:`WINDOW`
    steps; with ``target_on="heldout"`` the evaluation points as they are: measured accuracy
    and the drawn runs' median population pass rate) against the ``clock`` (:data:`CLOCKS`,
    s), the target dashed. Writes ``path``."""
    window = 1 if target_on == "heldout" else WINDOW
    n = len(curves)
    ncol = min(n, 5)
    nrow = -(-n // ncol)
    fig, axes = plt.subplots(
        nrow, ncol, figsize=(3.6 * ncol, 3.0 * nrow), squeeze=False, sharey=True
    )
    for ax, (name, (meas, pred)) in zip(axes.flat, curves.items()):
        for df, label in ((meas, "measured"), (pred, "predicted")):
            y = df["reward_mean"].rolling_mean(window, min_samples=window)
            ax.plot(df["t_end"], y, label=label)
        ax.axhline(target, ls="--", color="grey", lw=1)
        ax.set(title=name, xlabel="wall clock (s)" if clock == "wall" else "CPU time (s)")
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    axes[0][0].set_ylabel(
        "held-out accuracy" if target_on == "heldout" else f"reward, trailing mean of {WINDOW}"
    )
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@dataclass(frozen=True)
class LearningStudy:
    """What :func:`learning_study` wrote, for printing."""

    table: pl.DataFrame
    """One row per predicted run (:func:`compare_learning`)."""
    groups: pl.DataFrame
    """One row per controller and settings over its seeds."""
    directions: pl.DataFrame
    """Steps to target along G and B, measured against predicted (empty when no two
    settings are neighbours; :func:`analysis.learning.directions.directions_of`)."""
    notes: list[str]
    """Lines on what a reader could take for an error: held-out runs that started above
    the target, step costs extrapolated beyond the priced runs."""


def learning_study(
    fit_dirs: list[Path],
    real_dirs: list[Path],
    target: float,
    out_dir: Path,
    model: str = "saturating",
    draws: int = 200,
    seed: int = 0,
    clock: str = "wall",
    resim_draws: int = 0,
    target_on: str = "train",
    cost_dirs: list[Path] | None = None,
    cost_law: str = "power",
) -> LearningStudy:
    """``compare learning``'s study: :func:`compare_learning` (the same arguments), written
    to ``out_dir``: learning_comparison.csv, learning_comparison_by_controller.csv,
    learning_directions.csv, learning_comparison.png (:func:`comparison_figure`), fit.json
    and config.json. Raises ValueError as :func:`compare_learning` (bad or too few runs),
    before anything is written."""
    with phase("compare learning: fitting and predicting"):
        table, groups, curves, fit = compare_learning(
            fit_dirs, real_dirs, target, model, draws, seed, clock, resim_draws, target_on,
            cost_dirs, cost_law,
        )  # fmt: skip
    table.write_csv(out_dir / "learning_comparison.csv")
    groups.write_csv(out_dir / "learning_comparison_by_controller.csv")
    directions = directions_of(table, real_dirs)
    directions.write_csv(out_dir / "learning_directions.csv")
    comparison_figure(curves, target, out_dir / "learning_comparison.png", clock, target_on)
    strict_json.write_json(out_dir / "fit.json", fit, default=float)
    write_config(
        out_dir / "config.json",
        {
            "kind": "compare-learning",
            "fit_runs": [str(d) for d in fit_dirs],
            "real_runs": [str(d) for d in real_dirs],
            "target_accuracy": target,
            "learning_model": model,
            "clock": clock,
            "draws": draws,
            "seed": seed,
            "resimulate": resim_draws,
            "target_on": target_on,
            "cost_law": cost_law,
        },
    )
    notes = started_above(real_dirs, target) if target_on == "heldout" else []
    priced = list(cost_dirs or ()) or fit_dirs
    notes += extrapolation_notes(
        {str(d): read_run(d) for d in priced}, {Path(d).name: read_run(d) for d in real_dirs}
    )
    return LearningStudy(table, groups, directions, list(notes))
