"""``rolloutlab compare verl-tb``: out-of-sample check of the simulator on verl logs.

For each run: fit the cost model on its first ``K`` usable steps
(:func:`calibration.fits.verl_fit.fit_run_model`); for every later step draw lengths that
match that step's logged statistics (:func:`calibration.fits.cost_fit.draw_step_lengths`,
``R`` draws, fixed seeds), run the SimPy engine (:func:`sim.engine.core.generate`) with the
fitted cost and predict ``timing_s/gen`` as the mean makespan over the draws.

Baselines on the same test steps: ``constant`` = median gen time of the fit steps;
``linear`` = least squares (``scipy.linalg.lstsq``) of gen time on
``[1, response_length/mean, response_length/max]`` over the fit steps.
Error: ``MAPE = mean_t |pred_t / gen_t - 1|`` over the test steps.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from rolloutlab.calibration.fits.cost_fit import draw_step_lengths, to_cost
from rolloutlab.calibration.fits.verl_fit import VerlFitConfig, fit_run_model
from rolloutlab.calibration.scenarios.verl import load_runs
from rolloutlab.sim.engine.core import generate
from scipy import linalg

COLUMNS = ["run", "fit_steps", "test_steps", "mape_sim", "mape_constant", "mape_linear"]


def mape(pred: np.ndarray, actual: np.ndarray) -> float:
    """Mean absolute percentage error as a fraction: ``mean |pred / actual - 1|``."""
    return float(np.mean(np.abs(np.asarray(pred) / np.asarray(actual) - 1.0)))


def validate_runs(
    run_dirs: list[str], fit_steps: int, cfg: VerlFitConfig, progress=None
) -> pl.DataFrame:
    """One row per run with the columns :data:`COLUMNS` (MAPE as fractions).

    ``progress(run_name)`` is called after each run. Raises
    :class:`calibration.readers.verl_tb.VerlLogError` on bad logs and ValueError when a run has
    fewer than ``fit_steps + 1`` usable steps.
    """
    rows = []
    for name, files, data in load_runs(run_dirs, cfg):
        n_steps = len(data.fits)
        if n_steps <= fit_steps:
            raise ValueError(
                f"{files[0]}: {n_steps} usable steps, need more than --fit-steps {fit_steps}"
            )
        model = fit_run_model(data, cfg, fit_steps)
        cost = to_cost(model.decode, model.learner)
        test = range(fit_steps, n_steps)
        gen = data.gen_s[fit_steps:]
        pred = np.array([_simulate(data.draws[i], model.B, cfg, cost) for i in test])
        const = np.full(len(gen), np.median(data.gen_s[:fit_steps]))
        X = np.column_stack(
            [
                np.ones(n_steps),
                data.table["response_length/mean"].to_numpy(),
                data.table["response_length/max"].to_numpy(),
            ]
        )  # (n_steps, 3)
        coef = linalg.lstsq(X[:fit_steps], data.gen_s[:fit_steps])[0]
        rows.append(
            {
                "run": name,
                "fit_steps": fit_steps,
                "test_steps": len(gen),
                "mape_sim": mape(pred, gen),
                "mape_constant": mape(const, gen),
                "mape_linear": mape(X[fit_steps:] @ coef, gen),
            }
        )
        if progress is not None:
            progress(name)
    return pl.DataFrame(
        rows,
        schema={
            c: (pl.Utf8 if c == "run" else pl.Int64 if "steps" in c else pl.Float64)
            for c in COLUMNS
        },
    )


def _simulate(draw, B: int, cfg: VerlFitConfig, cost) -> float:
    """Mean simulated generation time (s) of one logged step over ``cfg.replicates`` draws."""
    return simulate_step(draw, B, cfg, cost, cfg.engine, cfg.max_response_length)[0]


def simulate_step(
    draw, B: int, cfg: VerlFitConfig, cost, engine, cap: int
) -> tuple[float, np.ndarray]:
    """``(generation time (s), finish times (B * G,) of the first draw)`` of one logged
    step: the mean makespan over ``cfg.replicates`` length draws (keyed on
    ``(cfg.seed + 1, step, r)``) plus ``cost.gen_overhead_s``."""
    spans: list[float] = []
    t_fin = np.empty(0)
    for r in range(cfg.replicates):
        L = draw_step_lengths(
            draw,
            cfg.icc,
            B,
            cfg.group_size,
            cap,
            np.random.default_rng([cfg.seed + 1, draw.step, r]),
        )
        batch = generate(L, np.full(B, draw.prompt_tokens), cost, engine)
        spans.append(float(np.max(batch.t_finish)))
        if r == 0:
            t_fin = np.asarray(batch.t_finish, dtype=np.float64)
    return float(np.mean(spans)) + cost.gen_overhead_s, t_fin
