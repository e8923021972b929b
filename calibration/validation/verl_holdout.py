"""``rolloutlab compare verl-tb``: out-of-sample check of the simulator on verl logs.

For each run: fit the cost model on its first ``K`` usable steps
(:func:`calibration.fits.verl_fit.fit_run_model`); for every later step draw lengths that
match that step's logged statistics (:func:`calibration.fits.cost_fit.draw_step_lengths`,
``R`` draws, fixed seeds), run the SimPy engine (:func:`sim.engine.core.generate`) with the
fitted cost and predict ``timing_s/gen`` as the mean makespan over the draws.

Baselines on the same test steps (:func:`baselines`): ``constant`` = median gen time of
the fit steps; ``persistence`` = the fit window's last gen time carried forward (the
model sees no held-out gen time either, so this is the fair persistence rule);
``previous_step`` = the previous step's measured gen time (one step ahead: it reads the
held-out run's own gen times, which the model never sees, so it is a reference, not a
rule the model must beat); ``linear`` = least squares (``scipy.linalg.lstsq``) of gen time
on ``[1, response_length/mean, response_length/max]`` over the fit steps.
Error: ``MAPE = mean_t |pred_t / gen_t - 1|`` over the test steps.

No two of the public runs share one configuration (model, trainer backend and rollout
mode differ between every pair), so no run-to-run floor exists for this table.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from rolloutlab.calibration.fits.cost_fit import draw_step_lengths, to_cost
from rolloutlab.calibration.fits.verl_fit import VerlFitConfig, fit_run_model
from rolloutlab.calibration.scenarios.verl import load_runs
from rolloutlab.sim.engine.core import generate
from scipy import linalg

BASELINES = ("constant", "persistence", "previous_step", "linear")
"""Naive rules of :func:`baselines`, in the order of their ``mape_*`` columns."""
COLUMNS = ["run", "fit_steps", "test_steps", "mape_sim", *(f"mape_{b}" for b in BASELINES)]


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
        lengths = np.column_stack(
            [
                data.table["response_length/mean"].to_numpy(),
                data.table["response_length/max"].to_numpy(),
            ]
        )  # (n_steps, 2)
        naive = baselines(np.asarray(data.gen_s), lengths, fit_steps)
        rows.append(
            {
                "run": name,
                "fit_steps": fit_steps,
                "test_steps": len(gen),
                "mape_sim": mape(pred, gen),
                **{f"mape_{b}": mape(naive[b], gen) for b in BASELINES},
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


def baselines(gen_s: np.ndarray, lengths: np.ndarray, fit_steps: int) -> dict[str, np.ndarray]:
    """The naive rules' predictions of the held-out steps' gen time (s), keyed by
    :data:`BASELINES`, each of shape ``(n_steps - fit_steps,)`` (module docstring).

    ``gen_s``: (n_steps,) logged ``timing_s/gen`` in step order; ``lengths``:
    (n_steps, 2) the steps' ``response_length/mean`` and ``/max``. Raises ValueError
    unless ``1 <= fit_steps < n_steps`` and the shapes agree."""
    n = len(gen_s)
    if not 1 <= fit_steps < n or lengths.shape != (n, 2):
        raise ValueError(
            f"need 1 <= fit_steps < {n} and lengths of shape ({n}, 2); got fit_steps "
            f"{fit_steps}, lengths {lengths.shape}"
        )
    fit, held = gen_s[:fit_steps], n - fit_steps
    X = np.column_stack([np.ones(n), lengths])  # (n_steps, 3)
    coef = linalg.lstsq(X[:fit_steps], fit)[0]
    return {
        "constant": np.full(held, np.median(fit)),
        "persistence": np.full(held, fit[-1]),
        "previous_step": gen_s[fit_steps - 1 : n - 1],
        "linear": X[fit_steps:] @ coef,
    }


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
