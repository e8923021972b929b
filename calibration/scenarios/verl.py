"""``rolloutlab calibrate verl-tb``: verl TensorBoard runs -> calibration JSON.

Several runs are pooled: every usable step of every run enters the length trend, the
decode fit and the learner fit (runs of one model and cluster are the intended use;
per-run fit quality is recorded under ``fit.runs``).
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
from rolloutlab.calibration.fits.cost_fit import fit_decode, fit_learner, to_cost
from rolloutlab.calibration.fits.lengths_fit import fit_run, split_sigma
from rolloutlab.calibration.fits.phase_fit import (
    STEP_TAG,
    explained_share,
    fit_step_phases,
    phase_table,
    step_baselines,
)
from rolloutlab.calibration.fits.verl_fit import (
    StepData,
    VerlFitConfig,
    first_steps,
    fit_features,
    run_features,
    step_data,
)
from rolloutlab.calibration.readers.verl_tb import event_files, read_run
from rolloutlab.calibration.scenarios.writer import calibration_dict, source_entry

NO_STEP = "no timing_s/step tag: the step's phases cannot be shared out"


def load_runs(run_dirs: list[str], cfg: VerlFitConfig) -> list[tuple[str, list[Path], StepData]]:
    """Read and check every run: ``(run name, event files, StepData)`` per run folder.
    Raises :class:`calibration.readers.verl_tb.VerlLogError` on the first bad run."""
    out = []
    for d in run_dirs:
        files = event_files(d)
        source = ", ".join(map(str, files))
        out.append(
            (
                Path(d).name if Path(d).is_dir() else Path(d).parent.name,
                files,
                step_data(read_run(d), source, cfg),
            )
        )
    return out


def calibrate_verl(
    run_dirs: list[str],
    cfg: VerlFitConfig,
    name: str = "verl",
    prompts: int | None = None,
    workers: int | None = None,
    defaults: dict | None = None,
    fit_steps: int | None = None,
) -> dict:
    """Fit the pooled runs and return a calibration dict (see :mod:`sim.scenario.scenario`).

    ``prompts``/``workers`` scale the simulated cluster (default: the logged ``B`` and
    ``cfg.engine.n_workers``); ``defaults`` go to the scenario's ``defaults``
    (``prompts`` is always set); ``fit_steps``: fit each run's first ``K`` usable steps
    only (the later ones stay unseen, for a within-run hold-out). Raises VerlLogError /
    ValueError on bad input.
    """
    runs = [(n, f, first_steps(d, fit_steps)) for n, f, d in load_runs(run_dirs, cfg)]
    B_logged = int(np.median(np.concatenate([r[2].n for r in runs]))) // cfg.group_size
    feats, per_run = [], []
    for run_name, files, data in runs:
        f = run_features(data, cfg, ", ".join(map(str, files)))
        one = fit_features(data, f, cfg)
        feats.append(f)
        per_run.append(
            {
                "run": run_name,
                "steps_used": len(data.fits),
                "steps_dropped": data.dropped_steps,
                "last_fitted_step": int(data.steps[-1]),
                "decode_mape": one.decode.mape,
                "decode_theta": list(one.decode.theta),
                "length_rms_z": one.lengths.rms_z,
                "length_mean_rel_err": one.lengths.mean_abs_rel_err_mean,
                "mu_growth_per_step": one.lengths.mu_growth_per_step,
                "sigma": one.lengths.sigma0,
                "B": f.B,
            }
        )
    fits = [s for _, _, data in runs for s in data.fits]
    decode = fit_decode(
        np.concatenate([f.decode for f in feats]),
        np.concatenate([f.gen_s for f in feats]),
        cfg.fit_prefill,
    )
    learner = fit_learner(
        np.concatenate([f.tokens for f in feats]),
        np.concatenate([f.train_s for f in feats]),
        np.concatenate([f.sync_s for f in feats]),
    )
    lengths = fit_run(sorted(fits, key=lambda f: f.step))
    sp, sw = split_sigma(lengths.sigma0, cfg.icc)
    prompt_tokens = int(round(float(np.median(np.concatenate([f.prompt_tokens for f in feats])))))
    phases, phase_report = fit_step_phases(
        [r[2].table for r in runs],
        B_logged * cfg.group_size,
        cfg.reward_latency,
        cfg.reward_workers,
        cfg.reward_overlap,
        cfg.seed,
    )
    timed = [r[2].table for r in runs if STEP_TAG in r[2].table.columns]
    baselines = step_baselines(timed) if timed else None
    shares: dict[str, dict[str, Any]] = {}
    for path, (run_name, _, _) in zip(run_dirs, runs):
        raw = read_run(path)  # every logged step, the ones the fits skip too
        if STEP_TAG not in raw.columns:
            shares[run_name] = {"phases": [], "explained_share": None, "note": NO_STEP}
            continue
        rows = phase_table(raw)
        shares[run_name] = {
            "phases": [asdict(r) for r in rows],
            "explained_share": explained_share(rows),
        }
    engine = replace(cfg.engine, n_workers=workers or cfg.engine.n_workers)
    dflt = {"prompts": prompts or B_logged, **(defaults or {})}
    return calibration_dict(
        name=name,
        lengths={
            "kind": "lognormal",
            "mu": lengths.mu0,
            "sigma_prompt": sp,
            "sigma_within": sw,
            "max_response_length": cfg.max_response_length,
            "mu_growth_per_step": lengths.mu_growth_per_step,
            "sigma_growth_per_step": lengths.sigma_growth_per_step,
        },
        prompt_tokens=prompt_tokens,
        cost=to_cost(decode, learner).to_dict(),
        engine=asdict(engine),
        defaults=dflt,
        provenance={
            "kind": "verl-tb",
            "sources": [source_entry(f) for _, fs, _ in runs for f in fs],
            "runs": [r[0] for r in runs],
            "fit_steps": fit_steps,
            "assumptions": {
                "group_size": cfg.group_size,
                "logged_prompts": B_logged,
                "max_response_length": cfg.max_response_length,
                "logged_engine": asdict(cfg.engine),
                "icc": cfg.icc,
                "replicates": cfg.replicates,
                "seed": cfg.seed,
                "fit_prefill": cfg.fit_prefill,
                "scaled": {"prompts": dflt["prompts"], "n_workers": engine.n_workers},
                "reward_latency_shape": asdict(cfg.reward_latency),
                "reward_workers": cfg.reward_workers,
                "reward_overlap": cfg.reward_overlap or "read from the log",
                "placement": "colocated",
            },
        },
        fit={
            "lengths": asdict(lengths),
            "decode": asdict(decode),
            "learner": asdict(learner),
            "steps_used": len(fits),
            "runs": per_run,
            "phases": shares,
            "step_phases": phase_report,
            "step_baselines": baselines,
        },
        step_phases=None if phases is None else phases.to_dict(),
    )
