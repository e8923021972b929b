"""Response-length models: how many tokens each rollout of a step generates.

Interface (docs/DESIGN.md, "Length model"): ``sample(rng, n_prompts, G, step)`` returns an
int array of shape ``(n_prompts, G)`` of response lengths in tokens (EOS included,
prompt excluded), each at most ``max_response_length``; a length equal to the cap has
finish reason ``length`` (:func:`finish_reasons`).

Common random numbers: draws are counter-based (:mod:`sim.models.hashrng`), keyed on
``(seed, prompt id, step, sample index)`` by :meth:`sample_ids`, so sample ``j`` of prompt
``p`` is the same whatever ``G`` is (controllers compared on one seed see the same prompts
and the same first samples; a larger G only adds samples), whichever pipeline draws it
(SimPy step by step, the fast path many steps per call, the asynchronous pipeline), and
a prompt's difficulty (its ``z_p`` or observed group) is the same whenever it recurs.
``sample(rng, ...)`` keys fresh prompt ids ``0..n-1`` on a seed drawn from ``rng``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import numpy as np
from rolloutlab.sim.models.hashrng import hash_normal, hash_uniform
from rolloutlab.sim.models.within_law import check_law, from_normal


class LengthModel(Protocol):
    """Draws a step's response lengths; see the module docstring."""

    @property
    def max_response_length(self) -> int:
        """Response cap (tokens); read-only, so frozen dataclasses implement it."""

    def sample(self, rng: np.random.Generator, n_prompts: int, G: int, step: int) -> np.ndarray:
        """``(n_prompts, G)`` int64 response lengths in ``[1, max_response_length]`` of
        ``n_prompts`` fresh prompts, drawn from ``rng``."""

    def sample_ids(self, seed: int, step, prompt_ids: np.ndarray, G: int) -> np.ndarray:
        """``prompt_ids.shape + (G,)`` int64 response lengths of the named prompts at
        ``step`` (an int, or an array broadcasting against ``prompt_ids``), a pure function
        of ``(seed, step, prompt id, sample index)``: sample ``j`` of a prompt is the same
        whatever ``G`` (the simulator's common random numbers)."""


def finish_reasons(lengths: np.ndarray, max_response_length: int) -> np.ndarray:
    """``"length"`` where a rollout hit the cap, else ``"stop"``; same shape as ``lengths``."""
    return np.where(np.asarray(lengths) >= max_response_length, "length", "stop")


def check_draw_size(n_prompts: int, G: int) -> None:
    """Raises ValueError unless ``n_prompts >= 1`` and ``G >= 1``."""
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
    within_law: str = "normal"
    """Law of the within-group noise ``z_pj`` (:mod:`sim.models.within_law`: ``normal``, the
    right-skewed ``gumbel`` (both mean 0, variance 1), or Student ``t``)."""
    within_df: float = 0.0
    """Degrees of freedom of the ``t`` law (unused otherwise)."""

    def __post_init__(self) -> None:
        if self.sigma_prompt < 0 or self.sigma_within < 0 or self.max_response_length < 1:
            raise ValueError(f"LognormalLengths: bad parameters {self}")
        check_law(self.within_law, self.within_df)

    def params_at(self, step) -> tuple:
        """``(mu, sigma_prompt, sigma_within)`` in force at ``step`` (int or int array)."""
        scale = 1.0 + self.sigma_growth_per_step * step
        return (
            self.mu + self.mu_growth_per_step * step,
            self.sigma_prompt * scale,
            self.sigma_within * scale,
        )

    def sample_ids(self, seed: int, step, prompt_ids: np.ndarray, G: int) -> np.ndarray:
        """``prompt_ids.shape + (G,)`` int64 lengths; ``z_p`` keyed on the prompt id,
        ``z_pj`` on (step, prompt, sample); ``step`` an int or an array that broadcasts
        with ``prompt_ids`` (many steps in one call). Raises ValueError if ``G < 1``."""
        pid, step = draw_keys(prompt_ids, step, G)
        return self._lengths(
            hash_normal(seed, 1, pid), hash_normal(seed, 2, step, pid, np.arange(G)), step
        )

    def sample(self, rng: np.random.Generator, n_prompts: int, G: int, step: int = 0) -> np.ndarray:
        """Draws from the caller's ``rng`` (calibration's fixed-seed draws); ``z_pj`` of
        sample ``j`` comes from the same stream position whatever ``G``."""
        check_draw_size(n_prompts, G)
        z_prompt = rng.standard_normal(n_prompts)[:, None]  # (n_prompts, 1)
        return self._lengths(z_prompt, rng.standard_normal((G, n_prompts)).T, step)

    def _lengths(self, z_prompt: np.ndarray, z_within: np.ndarray, step) -> np.ndarray:
        """``ceil(exp(mu + sp z_p + sw z_pj))`` clipped to ``[1, cap]``; ``z_within``
        (..., G) is overwritten."""
        mu, sp, sw = self.params_at(step)
        log_len = from_normal(z_within, self.within_law, self.within_df)
        log_len *= sw
        log_len += mu + sp * z_prompt  # == mu + sp z_p + sw z_pj exactly (IEEE + commutes)
        with np.errstate(over="ignore"):  # a heavy-tailed law's exp overflows to inf: the cap
            return np.clip(np.ceil(np.exp(log_len)), 1, self.max_response_length).astype(np.int64)


def draw_keys(prompt_ids, step, G: int) -> tuple[np.ndarray, np.ndarray]:
    """``(prompt ids (..., 1), step (..., 1) or scalar)`` int64 draw keys."""
    if G < 1:
        raise ValueError(f"need G >= 1, got {G}")
    step = np.asarray(step, dtype=np.int64)
    return np.asarray(prompt_ids, dtype=np.int64)[..., None], (
        step[..., None] if step.ndim else step
    )


@dataclass(frozen=True)
class EmpiricalLengths:
    """Resamples observed response lengths (tokens), with replacement.

    With ``groups`` (observed groups, one array per prompt) a prompt draws one observed
    group, and its G samples are drawn from that group's lengths, keeping the real
    within-group correlation; with only ``values`` the samples are i.i.d. Lengths above
    ``max_response_length`` are clipped to it.

    ``replace=False`` (with ``groups``) draws the G samples of a prompt without
    replacement: sample ``j`` is entry ``j`` of a random permutation of its observed group
    (keyed like the with-replacement draw, independent of G), so G up to the smallest
    observed group resamples whole observed groups (the per-sample calibration's
    empirical mode); a larger G raises ValueError.
    """

    values: np.ndarray
    max_response_length: int
    groups: tuple[np.ndarray, ...] = field(default=())
    replace: bool = True

    def __post_init__(self) -> None:
        v = np.asarray(self.values)
        if v.size == 0 or (v < 1).any():
            raise ValueError("EmpiricalLengths: need at least one length, all >= 1")
        if any(np.asarray(g).size == 0 for g in self.groups):
            raise ValueError("EmpiricalLengths: every observed group needs at least one length")

    def sample_ids(self, seed: int, step, prompt_ids: np.ndarray, G: int) -> np.ndarray:
        """``prompt_ids.shape + (G,)`` int64 lengths: a prompt's observed group is keyed on
        its id (the same group whenever it recurs), each sample on (prompt, step, sample).
        ``step`` broadcasts with ``prompt_ids``. Raises ValueError if ``G < 1``."""
        pid, step = draw_keys(prompt_ids, step, G)
        which = hash_uniform(seed, 3, pid) if self.groups else None  # (..., 1)
        if not self.replace and self.groups:
            self._check_g(G)
            u = hash_uniform(seed, 4, step, pid, np.arange(self._groups_table[0].max()))
            return self._lookup_permuted(which, u, G)
        return self._lookup(which, hash_uniform(seed, 4, step, pid, np.arange(G)))

    def sample(self, rng: np.random.Generator, n_prompts: int, G: int, step: int = 0) -> np.ndarray:
        """Draws from the caller's ``rng``; sample ``j`` from the same stream position
        whatever ``G``."""
        check_draw_size(n_prompts, G)
        which = rng.integers(len(self.groups), size=n_prompts)[:, None] if self.groups else None
        if not self.replace and self.groups:
            self._check_g(G)
            u = rng.random((self._groups_table[0].max(), n_prompts)).T
            return self._lookup_permuted(which, u, G)
        return self._lookup(which, rng.random((G, n_prompts)).T)

    def draw_from_groups(self, which: np.ndarray, u: np.ndarray, G: int) -> np.ndarray:
        """Lengths of observed group ``which`` (int64, ``(..., 1)``) for ``G`` samples:
        without replacement the first ``G`` entries of the permutation sorting ``u``
        (``(..., widest_group)``), with replacement the entries at uniforms ``u``
        (``(..., G)``). Raises ValueError (without replacement) for G above the
        smallest observed group."""
        if not self.replace:
            self._check_g(G)
            return self._lookup_permuted(which, u, G)
        return self._lookup(which, u)

    @property
    def widest_group(self) -> int:
        """Size of the largest observed group (the ``u`` width without replacement)."""
        return int(self._groups_table[0].max())

    def _check_g(self, G: int) -> None:
        smallest = int(self._groups_table[0].min())
        if G > smallest:
            raise ValueError(
                f"EmpiricalLengths: G={G} exceeds the smallest observed group ({smallest}) "
                "when drawing without replacement"
            )

    def _lookup_permuted(self, which, u: np.ndarray, G: int) -> np.ndarray:
        """The first ``G`` entries of the permutation of group ``which`` (..., 1) that
        sorts the uniforms ``u`` (..., max group size); padding positions sort last."""
        sizes, offsets, table = self._groups_table
        if which.dtype.kind == "f":
            which = (which * len(sizes)).astype(np.int64)
        u = np.where(np.arange(u.shape[-1]) < sizes[which], u, 2.0)
        return table[offsets[which] + np.argsort(u, axis=-1)[..., :G]]

    def _lookup(self, which, u: np.ndarray) -> np.ndarray:
        """Lengths at uniforms ``u`` (..., G) in [0, 1): from observed group ``which``
        (..., 1) (an int index, or a uniform to scale) when there are groups, else from
        ``values``."""
        if not self.groups:
            table = self._values_table
            return table[(u * table.size).astype(np.int64)]
        sizes, offsets, table = self._groups_table
        if which.dtype.kind == "f":
            which = (which * len(sizes)).astype(np.int64)
        return table[offsets[which] + (u * sizes[which]).astype(np.int64)]

    @cached_property
    def _values_table(self) -> np.ndarray:
        """``values`` as int64, clipped to the cap once (why: per-draw clips cost more
        than the draw on a 128-rollout step)."""
        return np.minimum(np.asarray(self.values, dtype=np.int64), self.max_response_length)

    @cached_property
    def _groups_table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(sizes, offsets, concatenated lengths clipped to the cap)`` of ``groups``."""
        sizes = np.array([len(g) for g in self.groups], dtype=np.int64)
        flat = np.concatenate([np.asarray(g, dtype=np.int64) for g in self.groups])
        return (
            sizes,
            np.concatenate(([0], np.cumsum(sizes)[:-1])),
            np.clip(flat, 1, self.max_response_length),
        )
