"""Fit a whole verl run: per-step length fits, the run-level length model, the cost model.

Assumptions for verl's GSM8K GRPO runs (``recipe/async_reward_agent``; see
``docs/calibration.md`` for the evidence):

* ``n = B*G`` responses per step is inferred per step as
  ``round(perf/total_num_tokens / (response_length/mean + prompt_length/mean))``
  (``total_num_tokens`` counts prompt + response tokens of the batch); these runs give
  5120 at every step = 1024 prompts x G=5.
* ``G`` is not logged: 5 (the recipe's ``n_resp_per_prompt``); ``B = n / G``.
* cap ``max_response_length`` = 1024 (recipe README).
* 8 GPUs; verl's default rollout ``tensor_model_parallel_size=2`` -> 4 engine workers;
  verl's default rollout ``max_num_seqs=1024``; every prompt has the step's mean
  prompt length; prefix caching across a group (vLLM ``n=G``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl
from rolloutlab.calibration.fits.cost_fit import (
    DecodeFit,
    LearnerFit,
    StepDraw,
    fit_decode,
    fit_learner,
    step_features,
)
from rolloutlab.calibration.fits.icc import bundled_icc
from rolloutlab.calibration.fits.lengths_fit import (
    RunLengthFit,
    StepFit,
    StepLengthStats,
    fit_run,
    fit_step,
)
from rolloutlab.calibration.readers.verl_tb import LENGTH_TAGS, VerlLogError, require
from rolloutlab.sim.engine.core import EngineConfig
from rolloutlab.sim.models.step_phases import RewardLatency

GEN_TAG = "timing_s/gen"
TRAIN_TAGS = ("timing_s/update_actor", "timing_s/old_log_prob", "timing_s/ref")
SYNC_TAG = "timing_s/reshard"
TOKENS_TAG = "perf/total_num_tokens"
PROMPT_TAG = "prompt_length/mean"


@dataclass(frozen=True)
class VerlFitConfig:
    """What the logs do not say about the runs (defaults: verl's GSM8K GRPO recipe)."""

    group_size: int = 5
    """G (verl ``actor_rollout_ref.rollout.n``); not logged."""
    max_response_length: int = 1024
    """Cap in tokens (verl ``data.max_response_length``)."""
    engine: EngineConfig = field(
        default_factory=lambda: EngineConfig(
            n_workers=4, max_num_seqs=1024, dispatch="group", prefix_caching=True
        )
    )
    """Generation cluster: 8 GPUs / rollout TP 2 = 4 workers, verl's max_num_seqs 1024."""
    replicates: int = 2
    """Length draws per step averaged in the cost fit and the predictions."""
    seed: int = 0
    """Seed of the length draws."""
    icc: float = field(default_factory=bundled_icc)
    """Intra-class correlation of log lengths (:mod:`calibration.fits.icc`)."""
    fit_prefill: bool = False
    """Fit ``prefill_s_per_token`` too (not identified by step totals; 0 otherwise)."""
    reward_latency: RewardLatency = field(
        default_factory=lambda: RewardLatency("uniform", 1.0, 40.0)
    )
    """Shape of the per-rollout reward latency law, scaled by the fit (the recipe's
    ``reward/gsm8k.py`` sleeps ``random.uniform(1, 40)`` s per sample)."""
    reward_workers: int = 256
    """Reward requests served at once (verl ``RayAsyncRewardAgent`` ``max_concurrency``)."""
    reward_overlap: str | None = None
    """``after`` / ``learner`` / ``generation``; ``None`` = read from the tags
    (:func:`calibration.fits.phase_fit.fit_reward_phase`)."""


@dataclass(frozen=True)
class StepData:
    """The checked per-step inputs of a run (one entry per usable step)."""

    steps: np.ndarray
    """``(n_steps,)`` training steps with every needed tag logged."""
    n: np.ndarray
    """``(n_steps,)`` responses per step."""
    fits: list[StepFit]
    draws: list[StepDraw]
    gen_s: np.ndarray
    """``(n_steps,)`` logged generation time (s)."""
    table: pl.DataFrame
    """The checked rows (all tags)."""
    dropped_steps: list[int]
    """Steps left out because a needed tag was not logged there."""


def step_data(table: pl.DataFrame, source: str, cfg: VerlFitConfig) -> StepData:
    """Check the tags the fits need and fit every usable step's lengths.

    Raises: :class:`VerlLogError` naming ``source``, tag and step for a missing tag,
    NaN/negative values or inconsistent length statistics.
    """
    need = list(LENGTH_TAGS) + [PROMPT_TAG, TOKENS_TAG, GEN_TAG]
    rows = require(table, need, source)
    dropped = sorted(set(table["step"].to_list()) - set(rows["step"].to_list()))
    if rows.height < 2:
        raise VerlLogError(f"{source}: fewer than 2 steps have all of {need}")
    mean, mx, mn = (rows[t].to_numpy() for t in LENGTH_TAGS[:3])
    clip = rows["response_length/clip_ratio"].to_numpy()
    n = np.rint(rows[TOKENS_TAG].to_numpy() / (mean + rows[PROMPT_TAG].to_numpy())).astype(int)
    fits, draws = [], []
    cap = cfg.max_response_length
    for i, step in enumerate(rows["step"].to_list()):
        if n[i] % cfg.group_size:
            raise VerlLogError(
                f"{source}: step {step}: inferred n={n[i]} responses is not a "
                f"multiple of G={cfg.group_size} (tag {TOKENS_TAG!r})"
            )
        s = StepLengthStats(
            step, float(mean[i]), float(mx[i]), float(mn[i]), float(clip[i]), int(n[i]), cap
        )
        try:
            f = fit_step(s)
        except ValueError as exc:
            raise VerlLogError(f"{source}: tags response_length/*: {exc}") from None
        fits.append(f)
        draws.append(
            StepDraw(
                step,
                f.mu,
                f.sigma,
                int(mx[i]),
                int(mn[i]),
                int(round(clip[i] * n[i])),
                int(round(rows[PROMPT_TAG][i])),
            )
        )
    return StepData(
        steps=rows["step"].to_numpy(),
        n=n,
        fits=fits,
        draws=draws,
        gen_s=rows[GEN_TAG].to_numpy(),
        table=rows,
        dropped_steps=dropped,
    )


@dataclass(frozen=True)
class RunFit:
    """Everything fitted on one run's first ``fit_steps`` usable steps."""

    lengths: RunLengthFit
    decode: DecodeFit
    learner: LearnerFit
    B: int
    """Prompts per step (median n / G)."""
    prompt_tokens: int
    """Median logged mean prompt length (tokens)."""
    fit_steps: list[int]


def first_steps(data: StepData, k: int | None) -> StepData:
    """``data`` cut to its first ``k`` usable steps (all if ``k`` is None); the later
    steps count as dropped. Raises ValueError if ``k < 2``."""
    if k is None:
        return data
    sl = fit_steps_of(data, k)
    return StepData(
        steps=data.steps[sl],
        n=data.n[sl],
        fits=data.fits[sl],
        draws=data.draws[sl],
        gen_s=data.gen_s[sl],
        table=data.table[sl],
        dropped_steps=sorted(data.dropped_steps + [int(s) for s in data.steps[sl.stop :]]),
    )


def fit_steps_of(data: StepData, k: int | None) -> slice:
    """The first ``k`` usable steps (all if ``k`` is None). Raises ValueError if ``k < 2``."""
    if k is not None and k < 2:
        raise ValueError(f"need at least 2 fit steps, got {k}")
    return slice(0, k)


@dataclass(frozen=True)
class RunFeatures:
    """What the cost fits read from one run's usable steps (one entry per step)."""

    B: int
    """Prompts per step (median n / G)."""
    decode: np.ndarray
    """``(n_steps, R, W, 4)`` decode features (:func:`step_features`)."""
    gen_s: np.ndarray
    """``(n_steps,)`` logged generation time (s)."""
    train_s: np.ndarray
    """``(n_steps,)`` learner time: the sum of :data:`TRAIN_TAGS` (s)."""
    tokens: np.ndarray
    """``(n_steps,)`` prompt + response tokens of the batch (:data:`TOKENS_TAG`)."""
    sync_s: np.ndarray
    """``(n_steps,)`` weight sync time (:data:`SYNC_TAG`, s)."""
    prompt_tokens: np.ndarray
    """``(n_steps,)`` logged mean prompt length (:data:`PROMPT_TAG`, tokens)."""


def run_features(data: StepData, cfg: VerlFitConfig, source: str) -> RunFeatures:
    """:class:`RunFeatures` of ``data``'s steps. Raises VerlLogError naming ``source`` when a
    learner or sync tag is missing."""
    B = int(np.median(data.n)) // cfg.group_size
    feats = step_features(
        data.draws,
        cfg.icc,
        B,
        cfg.group_size,
        cfg.max_response_length,
        cfg.engine,
        cfg.replicates,
        cfg.seed,
    )
    rows = require(data.table, TRAIN_TAGS + (SYNC_TAG,), source)
    return RunFeatures(
        B=B,
        decode=feats,
        gen_s=data.gen_s,
        train_s=sum(rows[t].to_numpy() for t in TRAIN_TAGS),
        tokens=rows[TOKENS_TAG].to_numpy(),
        sync_s=rows[SYNC_TAG].to_numpy(),
        prompt_tokens=data.table[PROMPT_TAG].to_numpy(),
    )


def fit_features(data: StepData, f: RunFeatures, cfg: VerlFitConfig) -> RunFit:
    """Lengths (trend), decode cost and learner cost fitted on ``data`` and its features
    ``f`` (:func:`run_features`). Raises ValueError on fewer than 2 steps."""
    return RunFit(
        lengths=fit_run(data.fits),
        decode=fit_decode(f.decode, f.gen_s, cfg.fit_prefill),
        learner=fit_learner(f.tokens, f.train_s, f.sync_s),
        B=f.B,
        prompt_tokens=int(round(float(np.median(f.prompt_tokens)))),
        fit_steps=[s.step for s in data.fits],
    )


def fit_run_model(data: StepData, cfg: VerlFitConfig, k: int | None = None) -> RunFit:
    """Fit lengths (trend), decode cost and learner cost on the first ``k`` usable steps."""
    data = first_steps(data, k)
    return fit_features(data, run_features(data, cfg, "learner tags"), cfg)
