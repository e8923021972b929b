"""Response-length models: how many tokens each rollout of a step generates.

Interface (DESIGN.md, "Length model"): ``sample(rng, n_prompts, G, step)`` returns an
int array of shape ``(n_prompts, G)`` of response lengths in tokens (EOS included,
prompt excluded), each at most ``max_response_length``; a length equal to the cap has
finish reason ``length`` (:func:`finish_reasons`).

Common random numbers: both models draw sample ``j`` of prompt ``p`` from the same
stream position whatever ``G`` is, so controllers compared on one seed see the same
prompts and the same first samples (a larger G only adds samples).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


class LengthModel(Protocol):
    """Draws a step's response lengths; see the module docstring."""

    max_response_length: int

    def sample(self, rng: np.random.Generator, n_prompts: int, G: int, step: int) -> np.ndarray:
        """``(n_prompts, G)`` int64 response lengths in ``[1, max_response_length]``."""


def finish_reasons(lengths: np.ndarray, max_response_length: int) -> np.ndarray:
    """``"length"`` where a rollout hit the cap, else ``"stop"``; same shape as ``lengths``."""
    return np.where(np.asarray(lengths) >= max_response_length, "length", "stop")


def _check(n_prompts: int, G: int) -> None:
    if n_prompts < 1 or G < 1:
        raise ValueError(f"need n_prompts >= 1 and G >= 1, got {n_prompts}, {G}")


@dataclass(frozen=True)
class LognormalLengths:
    """Hierarchical lognormal: ``log L_pj = mu + sigma_prompt z_p + sigma_within z_pj``.

    ``z`` standard normal; ``L`` is rounded up to an int >= 1 and clipped at
    ``max_response_length`` (finish reason ``length``). The total log-scale spread is
    ``sqrt(sigma_prompt^2 + sigma_within^2)``; the intra-class correlation of log
    lengths within a group is ``sigma_prompt^2 / (sigma_prompt^2 + sigma_within^2)``.
    Optional drift (R1-Zero-like growth of the chain of thought): ``mu`` grows by
    ``mu_growth_per_step`` per step, the spreads are multiplied by
    ``1 + sigma_growth_per_step * step``.
    """

    mu: float
    """Mean of log length (log tokens)."""
    sigma_prompt: float
    """Spread of per-prompt mean log length (prompt difficulty)."""
    sigma_within: float
    """Spread of log length within a prompt's group."""
    max_response_length: int
    """Cap in tokens (vLLM ``max_tokens``; verl ``response_length``)."""
    mu_growth_per_step: float = 0.0
    sigma_growth_per_step: float = 0.0

    def __post_init__(self) -> None:
        if self.sigma_prompt < 0 or self.sigma_within < 0 or self.max_response_length < 1:
            raise ValueError(f"LognormalLengths: bad parameters {self}")

    def params_at(self, step: int) -> tuple[float, float, float]:
        """``(mu, sigma_prompt, sigma_within)`` in force at ``step``."""
        scale = 1.0 + self.sigma_growth_per_step * step
        return (self.mu + self.mu_growth_per_step * step,
                self.sigma_prompt * scale, self.sigma_within * scale)

    def sample(self, rng: np.random.Generator, n_prompts: int, G: int, step: int = 0) -> np.ndarray:
        _check(n_prompts, G)
        mu, sp, sw = self.params_at(step)
        z_prompt = rng.standard_normal(n_prompts)  # (n_prompts,)
        z_within = rng.standard_normal((G, n_prompts)).T  # (n_prompts, G), CRN across G
        log_len = mu + sp * z_prompt[:, None] + sw * z_within
        lengths = np.ceil(np.exp(log_len))
        return np.clip(lengths, 1, self.max_response_length).astype(np.int64)


@dataclass(frozen=True)
class EmpiricalLengths:
    """Resamples observed response lengths (tokens), with replacement.

    With ``groups`` (observed groups, one array per prompt) a prompt draws one observed
    group, and its G samples are drawn from that group's lengths, keeping the real
    within-group correlation; with only ``values`` the samples are i.i.d. Lengths above
    ``max_response_length`` are clipped to it.
    """

    values: np.ndarray
    max_response_length: int
    groups: tuple[np.ndarray, ...] = field(default=())

    def __post_init__(self) -> None:
        v = np.asarray(self.values)
        if v.size == 0 or (v < 1).any():
            raise ValueError("EmpiricalLengths: need at least one length, all >= 1")

    def sample(self, rng: np.random.Generator, n_prompts: int, G: int, step: int = 0) -> np.ndarray:
        _check(n_prompts, G)
        if self.groups:
            which = rng.integers(len(self.groups), size=n_prompts)  # (n_prompts,)
            u = rng.random((G, n_prompts)).T  # (n_prompts, G)
            out = np.empty((n_prompts, G), dtype=np.int64)
            for p, gi in enumerate(which):
                grp = np.asarray(self.groups[gi])
                out[p] = grp[(u[p] * len(grp)).astype(int)]
        else:
            v = np.asarray(self.values)
            idx = (rng.random((G, n_prompts)).T * v.size).astype(int)  # (n_prompts, G)
            out = v[idx].astype(np.int64)
        return np.clip(out, 1, self.max_response_length)
