"""Predicted against measured generation makespan, slot idle fraction and stragglers,
step by step, for a traced synchronous run.

Method (docs/compare.md):

1. Calibrate on the first ``K`` steps: the cost model from every rollout's finish time
   (:mod:`analysis.idle.finish_fit`) and the length model from their lengths
   (:mod:`calibration.fits.prompt_lengths`: hierarchical lognormal, mean set by the prompt's
   length).
2. Predict every step with its measured group size and prompts (order and lengths):
   - ``replay``: the SimPy engine with the step's *measured* response lengths — tests
     the engine and the cost model;
   - ``drawn``: lengths drawn from the fitted length model (``draws`` draws, seeded by
     ``(seed, step, draw)``), the prediction being the mean over draws — tests the whole
     simulator. The straggler event is predicted when at least half the draws have one.
   - ``constant`` (baseline): the median measured makespan of the fit steps of the same
     G (all fit steps when that G was never seen), idle fraction likewise.
   - ``persistence`` (baseline): the previous step's measured makespan, idle fraction and
     straggler event (known when the step starts; the first step has none). It reads
     each held-out step's predecessor, which the simulator never sees.
   - ``linear`` (baseline): a straight line in the step index through the fit steps'
     measured makespan and idle fraction (least squares), fitted on the fit steps of the
     same G (all fit steps when that G has fewer than two), extrapolated to each step.
3. Metrics of both sides come from :func:`sim.trace.metrics.step_metrics` on trace tables.
   Errors over the held-out steps (``step >= K``): median absolute percentage error
   ``median_t |pred_t / meas_t - 1|`` (MdAPE) of makespan and of slot idle fraction,
   mean absolute idle error in points, and straggler agreement (share of steps whose
   predicted event equals the measured one).

``predicted_*`` columns of ``idle_comparison.csv`` hold the ``drawn`` prediction (the
whole simulator); ``replay_*`` and ``constant_*`` columns hold
the others.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import polars as pl
from rolloutlab.analysis.idle.finish_fit import FinishFit, fit_finish_times, simulate_step
from rolloutlab.analysis.idle.turns import (
    StepTurns,
    TurnDraws,
    fit_turn_cost,
    fitted_block,
    run_turns,
    step_turns,
)
from rolloutlab.analysis.inputs.run_input import RunData, StepLayout, step_layouts
from rolloutlab.calibration.fits.prompt_lengths import (
    PromptEmpiricalLengths,
    PromptLognormalLengths,
    fit_prompt_empirical,
    fit_prompt_lognormal,
)
from rolloutlab.sim.models.lengths import finish_reasons
from rolloutlab.sim.models.turns import MultiTurn
from rolloutlab.sim.trace.metrics import step_metrics
from rolloutlab.sim.trace.schema import frame

PREDICTIONS = ("drawn", "replay", "constant", "persistence", "linear")


@dataclass(frozen=True)
class IdleCompareConfig:
    """Settings of ``rolloutlab compare idle``."""

    fit_steps: int | None = None
    """K: steps ``0..K-1`` calibrate, the rest are held out. None: half the run's steps."""
    draws: int = 16
    """Length draws per step for the ``drawn`` prediction."""
    seed: int = 0
    """Seed of the length draws."""
    tau: float | None = None
    """Straggler threshold on max/median; None: the run's (controller spec's ``tau=``, else config)."""
    length_model: str = "empirical"
    """Length model of the ``drawn`` prediction: ``empirical`` (observed groups resampled by
    prompt length, :class:`~calibration.fits.prompt_lengths.PromptEmpiricalLengths`) or
    ``lognormal`` (:class:`~calibration.fits.prompt_lengths.PromptLognormalLengths`)."""
    clock: str = "wall"
    """The measured times compared: ``wall``, or ``cpu`` (the run put on its process CPU
    clock by :func:`analysis.inputs.run_input.on_cpu_clock` before the comparison), or ``probe``
    (that clock over each step's speed probe, :func:`analysis.idle.probe_clock.on_probe_clock`)."""

    def __post_init__(self) -> None:
        if self.clock not in ("wall", "cpu", "probe"):
            raise ValueError(f"clock must be 'wall', 'cpu' or 'probe', got {self.clock!r}")
        if self.length_model not in ("empirical", "lognormal"):
            raise ValueError(
                f"length model must be 'empirical' or 'lognormal', got {self.length_model!r}"
            )


@dataclass(frozen=True)
class IdleComparison:
    """What :func:`compare_idle` returns."""

    per_step: pl.DataFrame
    """One row per step: ``step, split`` (``fit``/``held_out``), ``group_size``, and for
    ``measured``, ``predicted`` (= drawn), ``replay`` and ``constant``: ``*_makespan_s``,
    ``*_idle_frac`` (slot idle fraction), ``*_straggler`` (bool), ``*_straggler_ratio``;
    ``persistence_makespan_s``, ``persistence_idle_frac``, ``persistence_straggler`` (the
    previous step's measured values; null on the first step); ``linear_makespan_s``,
    ``linear_idle_frac`` (the fit steps' straight line in the step index); plus
    ``drawn_straggler_prob`` (share of draws with a straggler event)."""
    summary: pl.DataFrame
    """One row per (prediction, scope): scope ``all`` or ``G=<g>``; ``held_out_steps``,
    ``makespan_mdape``, ``makespan_mape``, ``makespan_bias`` (median signed relative
    error), ``idle_mdape``, ``idle_mae`` (points), ``straggler_agreement``,
    ``straggler_rate_pred``, ``straggler_rate_meas``."""
    cost_fit: FinishFit
    lengths: PromptLognormalLengths | PromptEmpiricalLengths | MultiTurn
    """The length model; for a multi-turn run (``turns.parquet``) the fitted block."""
    fit_steps: int
    tau: float
    replay_rollouts: pl.DataFrame = field(repr=False)
    """The replayed run as a rollout table (trace schema, times from each step's submit)."""


def _rows(
    run_id: str, lay: StepLayout, lengths: np.ndarray, worker, t_first, t_finish, cap: int
) -> dict:
    n, G = lengths.shape
    size = n * G
    return {
        "run_id": np.full(size, run_id, dtype=object),
        "step": np.full(size, lay.step),
        "prompt_id": np.repeat(np.arange(n), G),
        "sample_idx": np.tile(np.arange(G), n),
        "group_size": np.full(size, G),
        "policy_version": np.full(size, lay.step),
        "learner_version": np.full(size, lay.step),
        "prompt_tokens": np.repeat(lay.prompt_tokens, G),
        "response_tokens": lengths.ravel(),
        "finish_reason": finish_reasons(lengths.ravel(), cap),
        "worker": worker,
        "t_submit": np.zeros(size),
        "t_first_token": t_first,
        "t_finish": t_finish,
    }


def _table(columns: list[dict]) -> pl.DataFrame:
    return frame({k: np.concatenate([c[k] for c in columns]) for k in columns[0]}, "rollouts")


def _metrics(rollouts: pl.DataFrame, tau: float, prefix: str) -> pl.DataFrame:
    m = step_metrics(rollouts, tau)
    return m.select(
        "step",
        pl.col("makespan_s").alias(f"{prefix}_makespan_s"),
        pl.col("slot_idle_frac").alias(f"{prefix}_idle_frac"),
        pl.col("straggler").alias(f"{prefix}_straggler"),
        pl.col("straggler_ratio").alias(f"{prefix}_straggler_ratio"),
    )


def fit_lengths(
    layouts: list[StepLayout], cap: int, kind: str = "lognormal"
) -> PromptLognormalLengths | PromptEmpiricalLengths:
    """The ``kind`` length model of the fit steps: every prompt group of every step is one group."""
    groups = [row for lay in layouts for row in lay.lengths]
    prompts = np.concatenate([lay.prompt_tokens for lay in layouts])
    fit = fit_prompt_empirical if kind == "empirical" else fit_prompt_lognormal
    return fit(groups, prompts, cap)


def _drawn(layouts, model, fit, run: RunData, cfg: IdleCompareConfig, tau: float) -> pl.DataFrame:
    cols = []
    for lay in layouts:
        G = lay.lengths.shape[1]
        for r in range(cfg.draws):
            L = model.sample_for_prompts(
                np.random.default_rng([cfg.seed, lay.step, r]), lay.prompt_tokens, G
            )
            w, t1, tf = simulate_step(L, lay.prompt_tokens, fit, run.engine, run.batching)
            cols.append(_rows(f"drawn-{r}", lay, L, w, t1, tf, run.max_response_length))
    return _drawn_metrics(_table(cols), tau)


def _drawn_metrics(table: pl.DataFrame, tau: float) -> pl.DataFrame:
    """Per-step mean over the draws (``run_id`` ``drawn-<r>``) of ``table``'s metrics."""
    per_draw = pl.concat(
        [step_metrics(df, tau) for _, df in table.group_by(["run_id"])]
    )  # one table per draw
    return per_draw.group_by("step").agg(
        pl.col("makespan_s").mean().alias("predicted_makespan_s"),
        pl.col("slot_idle_frac").mean().alias("predicted_idle_frac"),
        (pl.col("straggler").mean() >= 0.5).alias("predicted_straggler"),
        pl.col("straggler_ratio").mean().alias("predicted_straggler_ratio"),
        pl.col("straggler").mean().alias("drawn_straggler_prob"),
    )


def compare_idle(run: RunData, cfg: IdleCompareConfig = IdleCompareConfig()) -> IdleComparison:
    """Calibrate on the first ``K`` steps of ``run`` and predict every step (module docstring).

    Raises: ValueError when ``K < 2`` or no step is left to hold out, or a fit fails;
    :class:`analysis.inputs.run_input.RunInputError` on a step that is not one synchronous submit.
    """
    layouts = step_layouts(run)
    K = cfg.fit_steps if cfg.fit_steps is not None else len(layouts) // 2
    if K < 2 or K >= len(layouts):
        raise ValueError(
            f"{run.path}: --fit-steps {K} with {len(layouts)} steps; need 2 <= K < "
            f"{len(layouts)} so that at least one step is held out"
        )
    tau = cfg.tau if cfg.tau is not None else run.tau
    if run.turns is not None:
        fit, model, replay, drawn = _turn_predictions(run, layouts, K, cfg, tau)
    else:
        fit = fit_finish_times(layouts[:K], run.engine, batching=run.batching)
        model = fit_lengths(layouts[:K], run.max_response_length, cfg.length_model)
        replay = _table(
            [
                _rows(
                    "replay",
                    lay,
                    lay.lengths,
                    *simulate_step(lay.lengths, lay.prompt_tokens, fit, run.engine, run.batching),
                    run.max_response_length,
                )
                for lay in layouts
            ]
        )
        drawn = _drawn(layouts, model, fit, run, cfg, tau)
    measured = _metrics(run.rollouts, tau, "measured").join(
        step_metrics(run.rollouts, tau).select("step", "group_size"), on="step"
    )
    per_step = (
        measured.join(_metrics(replay, tau, "replay"), on="step")
        .join(drawn, on="step")
        .with_columns(
            pl.when(pl.col("step") < layouts[K].step)
            .then(pl.lit("fit"))
            .otherwise(pl.lit("held_out"))
            .alias("split")
        )
    )
    per_step = add_naive_rules(per_step)
    return IdleComparison(per_step, summarize(per_step), fit, model, K, tau, replay)


def _turn_predictions(run: RunData, layouts: list[StepLayout], K: int, cfg, tau: float):
    """``(cost fit, fitted block, replay table, drawn metrics)`` of a multi-turn run
    (:mod:`analysis.idle.turns`)."""
    assert run.turns is not None
    cap = run.max_response_length
    orders = {
        s: df.select("prompt_id", "sample_idx")
        for (s,), df in run.rollouts.group_by(["step"], maintain_order=True)
    }
    turns = [step_turns(run.turns, lay, orders[lay.step]) for lay in layouts]
    mt = fitted_block(run.turns, [lay.step for lay in layouts[:K]])
    # the torch engine keeps a parked sequence's KV cache in its slot: a later turn
    # prefills the tool's output only (docs/multi_turn.md)
    engine = dataclasses.replace(run.engine, prefix_caching=True)
    fit = fit_turn_cost(layouts[:K], turns[:K], engine, mt, cap)
    pool = TurnDraws.fit(turns[:K], mt)

    def rows(name: str, lay: StepLayout, st: StepTurns) -> dict:
        G = lay.lengths.shape[1]
        w, t1, tf = run_turns(st, lay.prompt_tokens, G, fit.cost, engine, mt, cap)
        L = st.lengths.sum(axis=0).reshape(-1, G)  # sampled tokens: the lengths in the table
        d = fit.submit_delay_s
        return _rows(name, lay, np.minimum(L, cap), w, t1 + d, tf + d, cap)

    replay = _table([rows("replay", lay, st) for lay, st in zip(layouts, turns)])
    drawn = _table(
        [
            rows(
                f"drawn-{r}",
                lay,
                pool.draw(np.random.default_rng([cfg.seed, lay.step, r]), lay.lengths.size),
            )
            for lay in layouts
            for r in range(cfg.draws)
        ]
    )
    return fit, mt, replay, _drawn_metrics(drawn, tau)


NAIVE = ("constant", "persistence", "linear")
"""The naive rules of :func:`add_naive_rules`."""


def add_naive_rules(per_step: pl.DataFrame) -> pl.DataFrame:
    """``per_step`` (columns ``step, split, group_size, measured_*``, as in
    :class:`IdleComparison`) with the ``constant_*``, ``persistence_*`` and ``linear_*``
    columns computed afresh (module docstring), replacing any it holds: so an
    ``idle_comparison.csv`` written before a rule existed can be scored with it."""
    stale = [c for c in per_step.columns if c.split("_")[0] in NAIVE]
    return _add_linear(_add_persistence(_add_constant(per_step.drop(stale))))


def _add_constant(per_step: pl.DataFrame) -> pl.DataFrame:
    fit = per_step.filter(pl.col("split") == "fit")
    by_g = fit.group_by("group_size").agg(
        pl.col("measured_makespan_s").median().alias("constant_makespan_s"),
        pl.col("measured_idle_frac").median().alias("constant_idle_frac"),
    )
    out = per_step.join(by_g, on="group_size", how="left")
    return out.with_columns(
        pl.col("constant_makespan_s").fill_null(fit["measured_makespan_s"].median()),
        pl.col("constant_idle_frac").fill_null(fit["measured_idle_frac"].median()),
    ).sort("step")


def _add_persistence(per_step: pl.DataFrame) -> pl.DataFrame:
    """Persistence columns: each step predicted by the step before it (in step order)."""
    return per_step.sort("step").with_columns(
        pl.col("measured_makespan_s").shift(1).alias("persistence_makespan_s"),
        pl.col("measured_idle_frac").shift(1).alias("persistence_idle_frac"),
        pl.col("measured_straggler").shift(1).alias("persistence_straggler"),
    )


def _add_linear(per_step: pl.DataFrame) -> pl.DataFrame:
    """Linear-trend columns: each step predicted by the least-squares line in the step index
    through the fit steps of its G (of all fit steps when its G has fewer than two)."""
    per_step = per_step.sort("step")
    fit = per_step.filter(pl.col("split") == "fit")
    steps, g = per_step["step"].to_numpy(), per_step["group_size"].to_numpy()
    out = {}
    for col in ("makespan_s", "idle_frac"):
        measured = f"measured_{col}"
        pooled = np.polyfit(fit["step"].to_numpy(), fit[measured].to_numpy(), 1)
        pred = np.empty(len(steps))
        for gs in np.unique(g):
            same = fit.filter(pl.col("group_size") == gs)
            coef = (
                np.polyfit(same["step"].to_numpy(), same[measured].to_numpy(), 1)
                if same["step"].n_unique() >= 2
                else pooled
            )
            pred[g == gs] = np.polyval(coef, steps[g == gs])
        out[f"linear_{col}"] = pred
    return per_step.with_columns(**{k: pl.Series(v) for k, v in out.items()})


def _errors(df: pl.DataFrame, pred: str) -> dict:
    rel = df[f"{pred}_makespan_s"].to_numpy() / df["measured_makespan_s"].to_numpy() - 1.0
    idle_p, idle_m = df[f"{pred}_idle_frac"].to_numpy(), df["measured_idle_frac"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        idle_rel = np.abs(idle_p / idle_m - 1.0)
    out = {
        "held_out_steps": df.height,
        "makespan_mdape": float(np.median(np.abs(rel))),
        "makespan_mape": float(np.mean(np.abs(rel))),
        "makespan_bias": float(np.median(rel)),
        "idle_mdape": float(np.median(idle_rel)),
        "idle_mae": float(np.mean(np.abs(idle_p - idle_m))),
    }
    strag = f"{pred}_straggler"
    if strag in df.columns:
        out.update(
            straggler_agreement=float((df[strag] == df["measured_straggler"]).mean()),
            straggler_rate_pred=float(df[strag].mean()),
        )
    else:
        out.update(straggler_agreement=float("nan"), straggler_rate_pred=float("nan"))
    out["straggler_rate_meas"] = float(df["measured_straggler"].mean())
    return out


def summarize(per_step: pl.DataFrame) -> pl.DataFrame:
    """Error table over the held-out steps of ``per_step`` (see :class:`IdleComparison`)."""
    held = per_step.filter(pl.col("split") == "held_out")
    rows = []
    scopes = [("all", held)] + [
        (f"G={g}", held.filter(pl.col("group_size") == g))
        for g in sorted(held["group_size"].unique().to_list())
    ]
    if len(scopes) == 2:  # one G: its row would repeat "all"
        scopes = scopes[:1]
    for pred in PREDICTIONS:
        name = "predicted" if pred == "drawn" else pred
        for scope, df in scopes:
            rows.append({"prediction": pred, "scope": scope, **_errors(df, name)})
    return pl.DataFrame(rows)
