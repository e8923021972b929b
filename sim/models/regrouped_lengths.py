"""A logged step's pooled lengths, dealt into synthetic groups by a Gaussian copula.

For a step whose ``n`` response lengths are known but not which prompt each belongs to
(the group labels dropped), the step is rebuilt as ``n // G_logged`` groups of
``G_logged``: latent scores ``y_ij = sqrt(rho) z_i + sqrt(1 - rho) e_ij`` (the random
effects of :mod:`sim.models.copula_lengths`) are ranked over the whole step and the
step's sorted lengths are dealt out by that rank, so the rebuilt step holds exactly the
logged lengths and ``rho`` only decides how they cluster into groups. A draw at ``(B,
G)`` then takes ``B`` of the rebuilt groups and the first ``G`` samples of each — the
subsampling of :func:`calibration.validation.measure.subsample`, so the model predicts
what ``compare groups`` measures on a logged step. ``rho = 0`` deals the lengths at
random (subsampling a step's pooled lengths without replacement).

This is a model of *logged* steps (it cannot draw a step that was not logged, nor more
prompts per step than :attr:`batch` allows): the validation's step-conditional
prediction, not a generator for new runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RegroupedLengths:
    """Pooled step lengths dealt into groups by rank of copula scores (module docstring)."""

    pooled: tuple[np.ndarray, ...]
    """Per step, its logged lengths (tokens, any order)."""
    steps: tuple[int, ...]
    """The steps of ``pooled``, strictly ascending."""
    rho: float
    """Between-prompt share of the latent score's variance, in ``[0, 1]``."""
    group_size: int
    """``G_logged``: the size of a rebuilt group."""
    batch: int
    """``B``: groups taken per simulated step (at most ``n // group_size`` of each step)."""
    max_response_length: int
    """Cap in tokens."""

    def __post_init__(self) -> None:
        if len(self.pooled) != len(self.steps) or np.any(np.diff(self.steps) <= 0):
            raise ValueError("RegroupedLengths: one pooled array per step, steps ascending")
        if not 0.0 <= self.rho <= 1.0 or self.group_size < 1 or self.batch < 1:
            raise ValueError(
                f"RegroupedLengths: need 0 <= rho <= 1, group_size >= 1, batch >= 1; got "
                f"{self.rho}, {self.group_size}, {self.batch}"
            )
        if min(len(x) for x in self.pooled) < self.batch * self.group_size:
            raise ValueError("RegroupedLengths: a step holds fewer than batch * group_size lengths")

    def sample(self, rng: np.random.Generator, n_prompts: int, G: int, step: int = 0) -> np.ndarray:
        """``(n_prompts, G)`` lengths: ``n_prompts / batch`` rebuilt copies of logged
        ``step`` (the nearest logged step at or before it), ``batch`` groups each. Raises
        ValueError unless ``n_prompts`` is a multiple of :attr:`batch` and ``1 <= G <=
        group_size``."""
        if n_prompts % self.batch or not 1 <= G <= self.group_size:
            raise ValueError(
                f"RegroupedLengths: n_prompts {n_prompts} not a multiple of batch "
                f"{self.batch}, or G {G} outside 1..{self.group_size}"
            )
        k = int(
            np.clip(np.searchsorted(self.steps, step, side="right") - 1, 0, len(self.steps) - 1)
        )
        x = np.asarray(self.pooled[k])
        reps, gl = n_prompts // self.batch, self.group_size
        groups = len(x) // gl
        keep = np.sort(np.stack([rng.permutation(len(x))[: groups * gl] for _ in range(reps)]))
        values = np.sort(x[keep], axis=1)  # (reps, groups * gl), the kept lengths sorted
        y = np.sqrt(self.rho) * rng.standard_normal((reps, groups, 1))
        y = (y + np.sqrt(1.0 - self.rho) * rng.standard_normal((reps, groups, gl))).reshape(
            reps, -1
        )
        rank = np.argsort(np.argsort(y, axis=1), axis=1)
        dealt = np.take_along_axis(values, rank, axis=1).reshape(reps, groups, gl)
        pick = np.argsort(rng.random((reps, groups)), axis=1)[:, : self.batch]
        out = np.take_along_axis(dealt, pick[:, :, None], axis=1)[:, :, :G]
        return out.reshape(n_prompts, G).astype(np.int64)
