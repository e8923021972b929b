"""Length dynamics: per-prompt difficulty that persists across epochs, within-group
correlation, drift over training steps, and empirical long-reasoning shapes.

:class:`GroupLengths` draws ``log L_pj`` through a Gaussian copula:
``z_pj = sqrt(icc) z_p + sqrt(1 - icc) e_pj`` with ``z_p`` keyed on the prompt id only
(a long-prone prompt is long-prone whenever it recurs) and ``e_pj`` on (prompt, step,
sample). ``u = Phi(z_pj)`` goes through the marginal (lognormal, or an empirical
quantile table such as ServeGen's DeepSeek-R1 output lengths), then drift at step ``t``:
``log L = c + s(t) (log L0 - c) + log(1 + g min(t, T))``, ``c`` the median log length,
``s(t) = 1 + h min(t, T)`` (:class:`Drift`). ``icc`` is the intra-class correlation of log
lengths in a group. Draws are counter-based hashes (splitmix64) of
``(seed, prompt, step, sample)``, so sample ``j`` is the same whatever ``G`` (common
random numbers) and many steps are drawn in one vectorised call.

Data (bundled, the package needs nothing else): ``sim/data/lengths/`` holds the
character lengths of Qwen2.5-Math's 100 MATH problems x 8 samples (within-group
correlation; characters because the source has text only and a constant
chars-per-token factor shifts ``log L`` without changing its variance split) and 1,000
quantiles of ServeGen's pooled DeepSeek-R1 output-token PMFs; origins in its SOURCE.md.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path

import numpy as np
from rolloutlab.sim.models.drift import DRIFTS, Drift
from rolloutlab.sim.models.hashrng import hash_normal
from rolloutlab.sim.models.lengths import LengthModel
from rolloutlab.sim.models.special import ndtr


@dataclass(frozen=True)
class GroupLengths:
    """Response lengths with persistent prompt difficulty, group correlation and drift
    (module docstring). Satisfies :class:`sim.models.lengths.LengthModel` and adds
    :meth:`sample_ids`."""

    max_response_length: int
    """Cap in tokens; a capped rollout has finish reason ``length``."""
    icc: float = 0.757
    """Within-group correlation of log lengths, in [0, 1) (default: fitted on Qwen2.5-Math
    MATH groups, :func:`fit_icc`)."""
    mu: float = 6.5
    """Lognormal marginal: mean log length (log tokens), when ``quantiles`` is empty."""
    sigma: float = 0.8
    """Lognormal marginal: spread of log length."""
    quantiles: tuple[int, ...] = field(default=())
    """Empirical marginal: sorted length quantiles at ``(k + 1/2) / n`` (tokens)."""
    drift: Drift = field(default_factory=Drift)
    """Growth over steps (:data:`DRIFTS`)."""

    def __post_init__(self) -> None:
        if not (0 <= self.icc < 1) or self.sigma < 0 or self.max_response_length < 1:
            raise ValueError(f"GroupLengths: need 0 <= icc < 1, sigma >= 0, cap >= 1: {self}")
        if (
            self.quantiles
            and (np.diff(self.quantiles) < 0).any()
            or min(self.quantiles or (1,)) < 1
        ):
            raise ValueError("GroupLengths: quantiles must be sorted and >= 1")

    @cached_property
    def _log_quantiles(self) -> tuple[np.ndarray, float]:
        q = np.log(np.asarray(self.quantiles, dtype=np.float64))
        return q, float(np.median(q))

    def sample_ids(self, seed: int, step, prompt_ids: np.ndarray, G: int) -> np.ndarray:
        """``prompt_ids.shape + (G,)`` int64 lengths; ``step`` an int or an array that
        broadcasts with ``prompt_ids`` (many steps in one call)."""
        pid = np.asarray(prompt_ids, dtype=np.int64)[..., None]  # (..., 1)
        step = np.asarray(step, dtype=np.int64)
        if step.ndim:
            step = step[..., None]
        z = hash_normal(seed, 2, pid, step, np.arange(G))  # (..., G); in place below
        z *= np.sqrt(1 - self.icc)
        z += np.sqrt(self.icc) * hash_normal(seed, 1, pid)
        flat = self.drift.mean_growth_per_step == 0 and self.drift.spread_growth_per_step == 0
        if self.quantiles:
            q, center = self._log_quantiles
            idx = ndtr(z, out=z).__imul__(len(q)).astype(np.int64)
            np.minimum(idx, len(q) - 1, out=idx)
            if flat:  # the length of each quantile, computed once (same float ops as below)
                return self._flat_table[idx]
            log0 = q[idx]
        else:
            log0, center = self.mu + self.sigma * z, self.mu
        return self._to_length(log0, center, step)

    def _to_length(self, log0, center: float, step) -> np.ndarray:
        """int64 lengths from undrifted log lengths ``log0`` at ``step`` (drift, then cap)."""
        shift, scale = self.drift.at(step)
        log_len = center + scale * (log0 - center) + shift
        return np.clip(np.ceil(np.exp(log_len)), 1, self.max_response_length).astype(np.int64)

    @cached_property
    def _flat_table(self) -> np.ndarray:
        """(n_quantiles,) lengths of the quantile table under a flat drift."""
        q, center = self._log_quantiles
        return self._to_length(q, center, 0)

    def sample(self, rng: np.random.Generator, n_prompts: int, G: int, step: int = 0) -> np.ndarray:
        """:class:`sim.models.lengths.LengthModel` form: fresh prompts keyed by ``rng``."""
        return self.sample_ids(int(rng.integers(2**62)), step, np.arange(n_prompts), G)


def step_lengths(
    model: LengthModel, seed: int, step: int, prompt_ids: np.ndarray, G: int
) -> np.ndarray:
    """``(n_prompts, G)`` lengths of one step, keyed on the prompts' ids
    (:meth:`sim.models.lengths.LengthModel.sample_ids`)."""
    return model.sample_ids(seed, step, prompt_ids, G)


def prompt_ids_for(step, n_prompts: int, dataset_size: int | None) -> np.ndarray:
    """Prompt ids of ``step`` (int or (T,) array -> (n_prompts,) or (T, n_prompts)):
    ``step * B + i``, modulo ``dataset_size`` when given (ids recur every epoch)."""
    ids = np.asarray(step, dtype=np.int64)[..., None] * n_prompts + np.arange(n_prompts)
    return ids % dataset_size if dataset_size else ids


def _data(name: str):
    return resources.files("rolloutlab.sim").joinpath("data", "lengths", name)


def math_group_lengths() -> np.ndarray:
    """``(100, 8)`` character lengths of the bundled Qwen2.5-Math groups (rows = problems)."""
    with _data("math_cot_100_char_lengths.csv").open() as f:
        rows = np.loadtxt(f, delimiter=",", skiprows=1, usecols=(0, 2, 3), dtype=np.int64)
    out = np.zeros((rows[:, 0].max() + 1, rows[:, 1].max() + 1), dtype=np.int64)
    out[rows[:, 0], rows[:, 1]] = rows[:, 2]
    return out


def fit_icc(lengths: np.ndarray) -> float:
    """ICC(1) of ``log lengths`` (n_groups, k) by one-way ANOVA (Shrout & Fleiss 1979):
    ``(MSB - MSW) / (MSB + (k - 1) MSW)``."""
    x = np.log(np.asarray(lengths, dtype=np.float64))
    n, k = x.shape
    msb = k * x.mean(axis=1).var(ddof=1)
    msw = x.var(axis=1, ddof=1).mean()
    return float((msb - msw) / (msb + (k - 1) * msw))


def derive_math_table(jsonl: str | Path) -> list[tuple[int, str, int, int]]:
    """Rows ``(idx, level, sample_idx, chars)`` of Qwen2.5-Math's ``math_cot_100.jsonl``:
    ``chars`` is ``len(code[sample_idx])`` (how the bundled table was made)."""
    rows = []
    for line in Path(jsonl).read_text().splitlines():
        d = json.loads(line)
        rows += [(int(d["idx"]), d["level"], j, len(t)) for j, t in enumerate(d["code"])]
    return rows


def servegen_pmf(folder: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Pooled ``output_tokens`` PMF of a ServeGen ``data/reason/deepseek-r1`` folder:
    every non-empty (client, 6-hour window) PMF weighs the same. Returns ``(values,
    probs)`` sorted by tokens. Raises ValueError naming a bad file/field."""
    pooled: dict[int, float] = {}
    n = 0
    for path in sorted(Path(folder).glob("chunk-*-dataset.json")):
        for window, fields in json.loads(path.read_text()).items():
            try:
                pmf = ast.literal_eval(fields["output_tokens"])
            except (KeyError, ValueError, SyntaxError) as exc:
                raise ValueError(f"{path}: window {window}: field 'output_tokens': {exc}") from None
            total = sum(pmf.values())
            if not pmf or total <= 0:
                continue
            n += 1
            for tokens, p in pmf.items():
                pooled[int(tokens)] = pooled.get(int(tokens), 0.0) + p / total
    if not n:
        raise ValueError(f"{folder}: no non-empty chunk-*-dataset.json output_tokens PMF")
    values = np.array(sorted(pooled), dtype=np.int64)
    return values, np.array([pooled[v] for v in values.tolist()]) / n


def pmf_quantiles(values: np.ndarray, probs: np.ndarray, n: int = 1000) -> np.ndarray:
    """``(n,)`` quantiles at ``(k + 1/2) / n`` of a PMF (resampling them draws from it to
    within ``1/n`` in probability)."""
    cdf = np.cumsum(probs) / np.sum(probs)
    return values[np.minimum(np.searchsorted(cdf, (np.arange(n) + 0.5) / n), len(values) - 1)]


def servegen_lengths(
    drift: str | Drift = "flat", icc: float | None = None, max_response_length: int = 32768
) -> GroupLengths:
    """Long-reasoning lengths: the bundled ServeGen DeepSeek-R1 output quantiles (bimodal
    in log tokens, tail to ~30k) as marginal, the Qwen2.5-Math group ICC, and a named
    drift (:data:`DRIFTS`)."""
    with _data("servegen_r1_output_quantiles.csv").open() as f:
        q = np.loadtxt(f, skiprows=1, dtype=np.int64)
    return GroupLengths(
        max_response_length=max_response_length,
        icc=fit_icc(math_group_lengths()) if icc is None else icc,
        quantiles=tuple(q.tolist()),
        drift=DRIFTS[drift] if isinstance(drift, str) else drift,
    )
