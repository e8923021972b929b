"""The measured side of ``compare groups`` / ``run-spread`` / ``replay``: the straggler
ratio of a step (SAGC, PAPERS.md §1; :func:`sim.trace.metrics.straggler_ratio`,
vectorised) and its expectation when each logged step is subsampled to ``B`` prompts of
``G`` samples without replacement (groups may differ in size: :func:`padded`)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np


def step_ratio(lengths: np.ndarray) -> np.ndarray:
    """``max / median`` over the last two axes of ``(..., B, G)`` lengths (the definition
    of :func:`sim.trace.metrics.straggler_ratio`, vectorised over leading axes)."""
    flat = np.asarray(lengths, dtype=np.float64).reshape(*lengths.shape[:-2], -1)
    return flat.max(axis=-1) / np.median(flat, axis=-1)


def padded(groups: list[np.ndarray]) -> np.ndarray:
    """``(n_groups, largest size)`` float lengths of one step's groups, NaN past the end of
    a smaller group (unequal group sizes: a prompt sampled in several rounds, filtered
    samples, regeneration)."""
    width = max(len(g) for g in groups)
    out = np.full((len(groups), width), np.nan)
    for i, g in enumerate(groups):
        out[i, : len(g)] = g
    return out


def eligible(m: np.ndarray, G: int) -> int:
    """How many groups of a :func:`padded` step matrix hold at least ``G`` samples."""
    return int((np.isfinite(m).sum(axis=1) >= G).sum())


def subsample(rng: np.random.Generator, m: np.ndarray, B: int, G: int, draws: int) -> np.ndarray:
    """``(draws, B, G)``: per draw, ``B`` of the groups of ``m`` that hold at least ``G``
    samples and ``G`` of each such group's samples, without replacement. ``m`` is
    ``(n_groups, width)``, NaN past the end of a smaller group (:func:`padded`); with no
    NaN the random numbers used are those of an equal-size matrix. Raises ValueError
    when fewer than ``B`` groups hold ``G`` samples."""
    nb, ng = m.shape
    present = np.isfinite(m)
    ok = present.sum(axis=1) >= G
    if ok.sum() < B:
        raise ValueError(f"subsample: {int(ok.sum())} groups hold {G} samples, {B} needed")
    keys = rng.random((draws, nb))
    keys[:, ~ok] = 2.0  # never among the first B
    rows = np.argsort(keys, axis=1)[:, :B]  # (draws, B)
    ckeys = rng.random((draws, B, ng))
    ckeys[~present[rows]] = 2.0  # a smaller group's padding is never drawn
    cols = np.argsort(ckeys, axis=2)[:, :, :G]  # (draws, B, G)
    return m[rows[:, :, None], cols]


def straggler_prob_exact(m: np.ndarray, G: int, tau: float) -> float:
    """``P(max/median > tau)`` over every choice of ``G`` samples per group of ``m``
    ``(B, G_logged)`` (all ``C(G_logged, G)^B`` equally likely). Tiny cases only."""
    choices = [list(itertools.combinations(row, G)) for row in np.asarray(m)]
    hits = [step_ratio(np.array(c)[None])[0] > tau for c in itertools.product(*choices)]
    return float(np.mean(hits))


@dataclass(frozen=True)
class Measured:
    """Measured straggler statistics of held-out steps at one (B, G)."""

    p: dict
    """tau -> mean straggler event."""
    p_se: dict
    """tau -> standard error (spread of per-step means / sqrt(steps))."""
    ratio_median: float
    ratios: np.ndarray
    """(steps * draws,) the measured ratios."""


def measure(mats: list[np.ndarray], B: int, G: int, taus, draws: int, seed: int) -> Measured:
    """Subsampled straggler statistics of held-out step matrices (module docstring)."""
    rng = np.random.default_rng([seed, B, G])
    ratios = np.stack([step_ratio(subsample(rng, m, B, G, draws)) for m in mats])  # (T, D)
    per_step = {t: (ratios > t).mean(axis=1) for t in taus}
    return Measured(
        p={t: float(v.mean()) for t, v in per_step.items()},
        p_se={
            t: float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0
            for t, v in per_step.items()
        },
        ratio_median=float(np.median(ratios)),
        ratios=ratios.ravel(),
    )
