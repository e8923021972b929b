"""The two predictions :class:`rolloutlab.sim.control.lagc.LAGC` trades off: learning signal per
group, and the straggler-driven step time, both as functions of the group size G.

- :func:`expected_signal`: the expected learning signal of one group of ``G`` binary
  rewards whose pass rate ``p`` has a ``Beta(a, b)`` belief (docs/controllers.md, "LAGC").
- :func:`population_beta`: a Beta for the pass rates of the prompt population, by the
  beta-binomial method of moments from the mean reward and the mean within-group variance.
- :class:`LengthPool`: a log-binned, forgetting histogram of response lengths with the
  expected maximum of ``n`` draws from it (the longest rollout of a step of ``n`` rollouts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

SIGNALS = ("variance", "informative")
"""Forms of the per-group signal (see :func:`expected_signal`); the first is the default."""


def expected_signal(a: np.ndarray, b: np.ndarray, G: int, form: str = "variance") -> np.ndarray:
    """Expected learning signal of one group of ``G`` Bernoulli(p) rewards, ``p ~ Beta(a, b)``.

    ``a, b``: (n,) Beta parameters (>= 0; ``a == 0`` or ``b == 0`` means ``p`` is exactly 1
    or 0: no signal). Returns (n,) floats in [0, 1].

    - ``"variance"`` (default): the expected population variance of the group's rewards,
      ``E[(1/G) sum_j (r_j - mean r)^2] = E[p(1-p)] (1 - 1/G)``, the per-group signal
      ``s_i`` of the learning-progress model :mod:`sim.models.learning` (the unbiased sample
      variance times ``1 - 1/G``; GRPO's group-mean baseline, DeepSeekMath §4.1.2), with
      ``E[p(1-p)] = a b / ((a+b)(a+b+1))``;
    - ``"informative"`` (GRPO with std-normalised advantages, where every non-homogeneous
      group carries a unit-scale advantage): ``P(informative) * (1 - 1/G)`` with
      ``P(informative) = 1 - E[p^G] - E[(1-p)^G]`` (for a fixed p
      ``1 - p^G - (1-p)^G``) and ``E[p^G] = B(a+G, b) / B(a, b) = prod_{k<G} (a+k)/(a+b+k)``
      (Beta moments; summed as ``log1p(-b/(a+b+k))``, exact also for a concentrated
      belief, where differences of ``betaln`` lose digits).

    The factor ``1 - 1/G`` is the group baseline's share: the mean of ``G`` rewards
    includes the reward it centres (docs/learning.md, property (b):
    diminishing returns in G). ``G = 1`` gives 0. Raises ValueError for an unknown ``form`` or ``G < 1``.
    """
    if form not in SIGNALS:
        raise ValueError(f"expected_signal: form must be one of {SIGNALS}, got {form!r}")
    if G < 1:
        raise ValueError(f"expected_signal: G must be >= 1, got {G}")
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    proper = (a > 0) & (b > 0)
    sa, sb = np.where(proper, a, 1.0), np.where(proper, b, 1.0)
    shrink = 1.0 - 1.0 / G
    if form == "variance":
        var = sa * sb / ((sa + sb) * (sa + sb + 1.0))
        return np.where(proper, var * shrink, 0.0)
    k = np.arange(G, dtype=np.float64)[:, None]  # (G, 1) against (n,)
    tot = sa + sb + k
    p_all = np.exp(np.log1p(-sb / tot).sum(axis=0)) + np.exp(np.log1p(-sa / tot).sum(axis=0))
    return np.where(proper, np.clip(1.0 - p_all, 0.0, 1.0) * shrink, 0.0)


def population_beta(
    mean: float, within_var: float | None, c_max: float = 1e6
) -> tuple[float, float]:
    """``(a, b)`` of the Beta of prompt pass rates with mean ``mean`` whose implied
    within-group variance is ``within_var`` (method of moments for the beta-binomial).

    For ``p ~ Beta(c m, c (1 - m))`` the unbiased within-group variance of a group's
    binary rewards has expectation ``E[p(1-p)] = m (1 - m) c / (c + 1)`` for every
    ``G >= 2``, so ``c = r / (1 - r)`` with ``r = within_var / (m (1 - m))``; ``r >= 1``
    (no spread between prompts) gives ``c_max``; ``r = 0`` (every group homogeneous) gives
    ``c = 0``: every pass rate is 0 or 1, no signal at any G. ``within_var = None`` (no
    group of size >= 2 seen) assumes ``c = 2`` (the uniform Beta's concentration).
    Raises ValueError unless ``0 <= mean <= 1``.
    """
    if not 0.0 <= mean <= 1.0:
        raise ValueError(f"population_beta: mean must be in [0, 1], got {mean}")
    spread = mean * (1.0 - mean)
    if within_var is None:
        c = 2.0
    elif spread <= 0.0:
        c = 0.0
    else:
        r = max(within_var, 0.0) / spread
        c = c_max if r >= 1.0 else min(r / (1.0 - r), c_max)
    return c * mean, c * (1.0 - mean)


@dataclass
class LengthPool:
    """Response lengths of recent steps as a log-binned histogram with forgetting.

    Bin ``k`` holds lengths ``L`` (tokens, ``L >= 1``; 0 counts as 1) with
    ``floor(bins_per_octave * log2 L) == k``; per bin the (decayed) count and length sum
    are kept, so a bin is represented by the mean of its lengths (exact when lengths are
    constant). :meth:`add` first multiplies every count by ``gamma``: an effective memory
    of ``1 / (1 - gamma)`` steps, for lengths that grow during training.
    """

    gamma: float = 0.9
    bins_per_octave: int = 16
    counts: dict[int, float] = field(default_factory=dict)
    sums: dict[int, float] = field(default_factory=dict)

    def add(self, lengths: np.ndarray) -> None:
        """Decay the pool by ``gamma`` and add one step's lengths ((n,) ints)."""
        x = np.maximum(np.asarray(lengths, dtype=np.float64).ravel(), 1.0)
        for k in list(self.counts):
            self.counts[k] *= self.gamma
            self.sums[k] *= self.gamma
            if self.counts[k] < 1e-6:  # negligible even in the max of 1e5 draws
                del self.counts[k], self.sums[k]
        bins = np.floor(self.bins_per_octave * np.log2(x)).astype(np.int64)
        keys, inv = np.unique(bins, return_inverse=True)
        cnt = np.bincount(inv)
        tot = np.bincount(inv, weights=x)
        for k, c, s in zip(keys.tolist(), cnt.tolist(), tot.tolist()):
            self.counts[k] = self.counts.get(k, 0.0) + c
            self.sums[k] = self.sums.get(k, 0.0) + s

    def _table(self) -> tuple[np.ndarray, np.ndarray]:
        keys = sorted(self.counts)
        w = np.array([self.counts[k] for k in keys])
        x = np.array([self.sums[k] / self.counts[k] for k in keys])
        return x, w / w.sum()

    def mean(self) -> float:
        """Mean length (tokens) of the pool. Raises ValueError if empty."""
        if not self.counts:
            raise ValueError("LengthPool: no lengths yet")
        x, q = self._table()
        return float(x @ q)

    def expected_max(self, n: int) -> float:
        """``E[max of n iid draws]`` (tokens) from the pool's distribution:
        ``sum_k x_k (F_k^n - F_{k-1}^n)`` over bins in ascending order, ``F`` the CDF
        (order statistics of a discrete distribution). Raises ValueError if empty or
        ``n < 1``."""
        if not self.counts or n < 1:
            raise ValueError(f"LengthPool.expected_max: need lengths and n >= 1, got n={n}")
        x, q = self._table()
        F = np.minimum(np.cumsum(q), 1.0)
        Fn = F**n
        return float(x @ np.diff(Fn, prepend=0.0))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable counts and sums (keys: bin index as str)."""
        return {
            "counts": {str(k): v for k, v in self.counts.items()},
            "sums": {str(k): v for k, v in self.sums.items()},
        }

    def load(self, d: dict[str, Any]) -> None:
        """Restore :meth:`to_dict` output."""
        self.counts = {int(k): float(v) for k, v in d["counts"].items()}
        self.sums = {int(k): float(v) for k, v in d["sums"].items()}
