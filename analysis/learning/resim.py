"""Re-simulated adaptive controllers for ``rolloutlab compare learning --resimulate``:
the run's own controller object (rebuilt from its config) chooses G in runs drawn from
the fitted models, instead of replaying the G it chose in the real run.

Per draw and step: ``G = propose`` (:func:`sim.control.observation.propose_step`, with the
step's prompt ids); B fresh prompts with ``p0 ~ Beta(a, b)`` and counts ``k ~
Binomial(G, sigmoid(logit p0 + theta))`` (rewards: k ones in a group of G); lengths drawn
with replacement from the **fit run's lengths at the same step** (length model:
**modelling choice** — on graph-walk the ICC of log lengths is about 0.1, so a group's
lengths are close to independent draws, and drawing from the same step keeps their drift
as RL shortens the walks); generation time ``c1 B G``, step time ``c0 + c1 B G`` (the
cost model); :func:`sim.control.observation.observe_step` hands these to the controller; theta
moves as in :mod:`calibration.fits.learning_draws` (on-policy, dynamic sampling as the run).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rolloutlab.analysis.learning.step_cost import Cost, busy_time
from rolloutlab.calibration.readers.run_curve import RunCurve
from rolloutlab.sim.control.observation import observe_step, propose_step
from rolloutlab.sim.control.spec import parse_controller
from rolloutlab.sim.models.learning import LearningParams, saturating_shift
from rolloutlab.sim.models.learning_noise import (
    effective_samples,
    noise_multiplier,
    noisy_drive,
    step_signal,
)
from rolloutlab.sim.trace import schema as trace
from scipy import special


def step_lengths(run_dir: Path) -> list[np.ndarray]:
    """Per step of the run, its rollouts' response lengths (tokens), (n_t,) each."""
    for suffix in (".parquet", ".jsonl"):
        p = Path(run_dir) / f"rollouts{suffix}"
        if p.exists():
            rolls = trace.read(p, "rollouts").select("step", "response_tokens")
            break
    else:
        raise ValueError(f"{run_dir}: no rollouts.parquet or rollouts.jsonl")
    parts = rolls.sort("step").partition_by("step", as_dict=True, maintain_order=True)
    return [g["response_tokens"].to_numpy() for g in parts.values()]


def resimulate(
    params: LearningParams,
    beta: tuple[float, float],
    spec: str,
    config: dict,
    curve: RunCurve,
    lengths: list[np.ndarray],
    cost: Cost,
    draws: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(reward (draws, T), t_end (draws, T) s, G (draws, T))`` of ``draws`` runs in which
    controller ``spec`` (built as the real run built it: ``seed`` and ``tau`` from
    ``config``) chooses G (module docstring). ``curve`` gives T, B and lr per step;
    ``lengths``: the fit run's per-step lengths (a shorter list repeats its last step)."""
    rng = np.random.default_rng(seed)
    a, b = beta
    T = len(curve.G)
    B = np.array([c.size for c in curve.counts])
    reward, clock, Gs = np.empty((draws, T)), np.empty((draws, T)), np.empty((draws, T), int)
    for d in range(draws):
        ctl = parse_controller(spec, seed=int(config.get("seed", 0)), tau=config.get("tau", 4.0))
        theta, t_now = 0.0, 0.0
        for t in range(T):
            n = int(B[t])
            ids = np.arange(t * n, (t + 1) * n)
            G = propose_step(ctl, ids)
            k = rng.binomial(G, special.expit(special.logit(rng.beta(a, b, n)) + theta))
            rewards = (np.arange(G)[None, :] < k[:, None]).astype(float)  # (n, G)
            pool = lengths[min(t, len(lengths) - 1)]
            lens = rng.choice(pool, size=(n, G))
            gen = float(busy_time(cost, n * G))
            observe_step(ctl, lens, rewards=rewards, gen_time_s=gen,
                         step_time_s=cost[0] + gen, prompt_ids=ids)  # fmt: skip
            sig = (k / G) * (1 - k / G)
            kept = max(int((sig > 0).sum()), 1) if curve.dynamic_sampling else n
            drive = (
                params.kappa
                * curve.lr[t]
                / params.lr_ref
                * step_signal(sig, params.advantage).sum()
                / kept
            )
            if params.b_noise > 0:  # the noise term (sim.models.learning_noise)
                n_inf = effective_samples((sig > 0).sum(), G, params.rho)
                x = noise_multiplier(rng, n_inf, params.b_noise)
                drive = float(noisy_drive(drive, n_inf, params.b_noise, x))
            theta = float(saturating_shift(theta, drive, params.theta_max))
            t_now += cost[0] + gen
            reward[d, t], clock[d, t], Gs[d, t] = k.sum() / (n * G), t_now, G
    return reward, clock, Gs


def resimulated_rows(reward: np.ndarray, clock: np.ndarray, G: np.ndarray, target: float,
                     window: int) -> dict:  # fmt: skip
    """Median time and steps to target over the draws (None when over half never reach
    it; trailing mean of ``window`` steps, as the measured side) and the mean G."""
    c = np.cumsum(np.pad(reward, ((0, 0), (1, 0))), axis=1)
    hit = (c[:, window:] - c[:, :-window]) / window >= target - 1e-12
    rows = np.arange(reward.shape[0])
    step = np.where(hit.any(axis=1), hit.argmax(axis=1) + window, -1)
    t = np.where(step > 0, clock[rows, np.maximum(step, 1) - 1], np.inf)
    med_t = float(np.median(t))
    med_step = float(np.median(np.where(step > 0, step, np.inf)))
    return {
        "resim_time_to_target_s": med_t if np.isfinite(med_t) else None,
        "resim_steps_to_target": int(np.ceil(med_step)) if np.isfinite(med_step) else None,
        "resim_mean_G": float(G.mean()),
    }


def run_config(run_dir: Path) -> dict:
    """The ``config`` block of the run's config.json (the sync block of an async run)."""
    import json

    cfg = json.loads((Path(run_dir) / "config.json").read_text())["config"]
    return cfg.get("sync", cfg)
