"""Per-step marginal lengths tied within a group by one Gaussian-copula ICC.

A random-effects model on the normal-score scale (a Gaussian copula, Nelsen, *An
Introduction to Copulas*, 2nd ed., §2.10 / §3.1; the one-way random-effects ICC of
Shrout & Fleiss 1979, case 1): a prompt ``i`` and its sample ``j`` at step ``t`` get

    y_ij = sqrt(rho) z_i + sqrt(1 - rho) e_ij,   z_i, e_ij ~ N(0, 1) independent,
    L_ij = Q_t(Phi(y_ij)),

so every sample's marginal law is the step's ``Q_t`` whatever ``rho`` is, and ``rho`` (the
share of normal-score variance between prompts) only decides how samples of one group
move together. ``Q_t`` is a quantile grid: ``Q_t(u) = q[t, floor(u K)]`` over ``K`` values
(a step's sorted logged lengths, or a parametric law evaluated at ``(k + 1/2) / K``).
``rho = 0`` draws ``B*G`` i.i.d. lengths from ``Q_t`` (order statistics of i.i.d. draws);
``rho = 1`` gives every sample of a group the same length.

Step lookup: row ``k`` of ``quantiles`` serves steps ``steps[k] <= step < steps[k+1]``
(before the first, the first; after the last, the last). Common random numbers as in
:mod:`sim.models.lengths`: sample ``j`` of a prompt is the same whatever ``G``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rolloutlab.sim.models.hashrng import hash_normal
from rolloutlab.sim.models.lengths import check_draw_size, draw_keys
from rolloutlab.sim.models.special import ndtr


@dataclass(frozen=True)
class CopulaLengths:
    """Gaussian-copula random-effects lengths (module docstring)."""

    quantiles: np.ndarray
    """``(T, K)`` int lengths, each row sorted ascending: the marginal quantile grid of
    each of ``T`` steps (tokens, >= 1, <= the cap)."""
    steps: tuple[int, ...]
    """``(T,)`` ascending steps the rows hold (the model's step numbering)."""
    rho: float | tuple[float, ...]
    """Between-prompt share of normal-score variance, in ``[0, 1]``: one value, or one per
    row of ``quantiles`` (a correlation that moves with the step)."""
    max_response_length: int
    """Cap in tokens."""

    def __post_init__(self) -> None:
        q = np.asarray(self.quantiles)
        if q.ndim != 2 or q.shape[0] != len(self.steps) or q.shape[1] < 1:
            raise ValueError(f"CopulaLengths: quantiles {q.shape} against {len(self.steps)} steps")
        rho = np.asarray(self.rho, dtype=np.float64)
        if rho.ndim > 1 or (rho.ndim == 1 and rho.size != q.shape[0]):
            raise ValueError(f"CopulaLengths: {rho.size} rho values for {q.shape[0]} rows")
        if np.any(rho < 0.0) or np.any(rho > 1.0):
            raise ValueError(f"CopulaLengths: rho {self.rho} outside [0, 1]")
        if q.min() < 1 or q.max() > self.max_response_length:
            raise ValueError("CopulaLengths: quantiles outside [1, max_response_length]")
        if np.any(np.diff(q, axis=1) < 0) or np.any(np.diff(self.steps) <= 0):
            raise ValueError("CopulaLengths: rows must be sorted and steps strictly ascending")

    def row(self, step) -> np.ndarray:
        """Row index (int or int array) of ``quantiles`` in force at ``step``."""
        k = np.searchsorted(np.asarray(self.steps), np.asarray(step), side="right") - 1
        return np.clip(k, 0, len(self.steps) - 1)

    def _lengths(self, z: np.ndarray, e: np.ndarray, step) -> np.ndarray:
        """``Q_t(Phi(sqrt(rho) z + sqrt(1 - rho) e))``; ``z`` (..., 1), ``e`` (..., G)."""
        q = np.asarray(self.quantiles)
        row = self.row(step)
        rho = np.asarray(self.rho, dtype=np.float64)
        if rho.ndim == 1:
            rho = rho[row]  # scalar or (..., 1), as the step: each prompt's step's rho
        u = ndtr(np.sqrt(rho) * z + np.sqrt(1.0 - rho) * e)
        k = np.minimum((u * q.shape[1]).astype(np.int64), q.shape[1] - 1)
        return q[row, k].astype(np.int64)

    def sample(self, rng: np.random.Generator, n_prompts: int, G: int, step: int = 0) -> np.ndarray:
        """``(n_prompts, G)`` lengths of fresh prompts at ``step`` from ``rng``; sample
        ``j`` comes from the same stream position whatever ``G``. Raises ValueError if
        ``n_prompts < 1`` or ``G < 1``."""
        check_draw_size(n_prompts, G)
        z = rng.standard_normal(n_prompts)[:, None]
        return self._lengths(z, rng.standard_normal((G, n_prompts)).T, step)

    def sample_ids(self, seed: int, step, prompt_ids: np.ndarray, G: int) -> np.ndarray:
        """``prompt_ids.shape + (G,)`` lengths keyed on ``(seed, step, prompt, sample)``
        (:mod:`sim.models.hashrng`); ``z_i`` keyed on the prompt id only."""
        pid, step = draw_keys(prompt_ids, step, G)
        z = hash_normal(seed, 1, pid)
        return self._lengths(z, hash_normal(seed, 2, step, pid, np.arange(G)), step)
