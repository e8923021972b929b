"""Pass-rate models and keyed Bernoulli rewards (docs/dynamic_sampling.md).

Every prompt ``i`` has a pass rate ``p_i``: the probability that one sampled response is
correct. It is drawn once per prompt, keyed on ``(seed, prompt_id)`` through
:mod:`sim.models.hashrng`, so a prompt that recurs in a later epoch keeps its ``p_i``. Specs:

- ``fixed:P`` -- every prompt has ``p_i = P`` (``P`` in [0, 1]);
- ``beta:A,B`` -- ``p_i ~ Beta(A, B)`` (``A, B > 0``; inverse-CDF of a keyed uniform);
- a file path -- an empirical distribution or a fitted spec:
  * ``*.json``: a JSON object whose ``pass_rate`` block (or the object itself) holds
    either ``"spec": "fixed:P" | "beta:A,B"`` (what ``rolloutlab calibrate pass-rate``
    and the scenario JSON carry) or ``"values": [p_1, p_2, ...]``; an optional
    ``"coupling"`` number there is kept as the model's :attr:`coupling`;
  * ``*.csv``: a header row with a ``pass_rate`` column, one prompt per row;
  * ``*.jsonl``: one JSON object per line with a ``pass_rate`` field.
  Empirical values are resampled: ``p_i = values[floor(u_i n)]``.

Rewards: sample ``j`` of prompt ``i`` at step ``t`` is correct when
``u_{t,i,j} < P_ij``, ``u`` a keyed uniform on ``(seed, step, prompt_id, sample_idx)``
(:func:`draw_correct`), so sample ``j`` is the same whatever G (coupling 0).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
from rolloutlab.sim.models.hashrng import hash_uniform
from rolloutlab.sim.models.special import expit, logit
from rolloutlab.sim.trace import strict_json

STREAM_PASS_RATE = 11
"""hashrng stream of the per-prompt pass-rate draw (streams 1-4 are the length models')."""
STREAM_CORRECT = 12
"""hashrng stream of the per-rollout correctness draw."""


class PassRateModel(Protocol):
    """A distribution of per-prompt pass rates (docs/learning.md)."""

    @property
    def spec(self) -> str:
        """The spec or file it was read from, e.g. ``beta:0.6,1.4``."""
        ...

    @property
    def coupling(self) -> float:
        """Length-correctness coupling fitted with it (0 for none)."""
        ...

    def initial(self, seed: int, prompt_ids: np.ndarray) -> np.ndarray:
        """``prompt_ids.shape`` float64 pass rates in [0, 1] at step 0, keyed on
        ``(seed, prompt_id)``."""
        ...


def _check_p(p: float, where: str) -> float:
    if not (0.0 <= p <= 1.0):  # NaN fails too
        raise ValueError(f"{where}: a pass rate must be in [0, 1], got {p}")
    return float(p)


@dataclass(frozen=True)
class FixedPassRate:
    """Every prompt has pass rate ``p``."""

    p: float
    coupling: float = 0.0

    def __post_init__(self) -> None:
        _check_p(self.p, f"pass rate fixed:{self.p}")

    @property
    def spec(self) -> str:
        """The ``--pass-rate`` spec that rebuilds this model."""
        return f"fixed:{self.p:g}"

    def initial(self, seed: int, prompt_ids: np.ndarray) -> np.ndarray:
        """``prompt_ids.shape`` array filled with ``p``."""
        return np.full(np.shape(prompt_ids), self.p, dtype=np.float64)


@dataclass(frozen=True)
class BetaPassRate:
    """``p_i ~ Beta(a, b)``, the beta-binomial model of per-prompt difficulty."""

    a: float
    b: float
    coupling: float = 0.0

    def __post_init__(self) -> None:
        for name, v in (("A", self.a), ("B", self.b)):
            if not (v > 0) or math.isinf(v):
                raise ValueError(
                    f"pass rate beta:{self.a},{self.b}: {name} must be finite and > 0, got {v}"
                )

    @property
    def spec(self) -> str:
        """The ``--pass-rate`` spec that rebuilds this model."""
        return f"beta:{self.a:g},{self.b:g}"

    def initial(self, seed: int, prompt_ids: np.ndarray) -> np.ndarray:
        """Beta quantiles of keyed uniforms ``u(seed, prompt_id)``."""
        u = hash_uniform(seed, STREAM_PASS_RATE, np.asarray(prompt_ids, dtype=np.int64))
        from scipy.stats import beta as beta_dist  # why: scipy.stats costs ~1 s at import

        return np.asarray(beta_dist.ppf(u, self.a, self.b), dtype=np.float64)


@dataclass(frozen=True)
class EmpiricalPassRate:
    """Pass rates resampled from observed per-prompt values."""

    values: tuple[float, ...]
    source: str = "<values>"
    coupling: float = 0.0
    _arr: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"{self.source}: no pass rates")
        arr = np.asarray(self.values, dtype=np.float64)
        bad = np.flatnonzero(~((arr >= 0) & (arr <= 1)))
        if bad.size:
            raise ValueError(
                f"{self.source}: row {bad[0]}, field 'pass_rate': must be in [0, 1], "
                f"got {arr[bad[0]]}"
            )
        object.__setattr__(self, "_arr", arr)

    @property
    def spec(self) -> str:
        """The ``--pass-rate`` spec that rebuilds this model (the file it came from)."""
        return self.source

    def initial(self, seed: int, prompt_ids: np.ndarray) -> np.ndarray:
        """``values[floor(u n)]`` for keyed uniforms ``u(seed, prompt_id)``."""
        u = hash_uniform(seed, STREAM_PASS_RATE, np.asarray(prompt_ids, dtype=np.int64))
        k = np.minimum((u * len(self._arr)).astype(np.int64), len(self._arr) - 1)
        return self._arr[k]


def parse_pass_rate(spec: str, coupling: float = 0.0) -> PassRateModel:
    """A model from ``fixed:P``, ``beta:A,B`` or a file path (module docstring).

    ``coupling`` is the model's length-correctness coupling unless the file carries one.
    Raises ValueError naming the spec, file or field: P outside [0, 1] or NaN, A or B not
    > 0, unparsable numbers, a missing file, a file without pass rates.
    """
    spec = str(spec).strip()
    kind, sep, arg = spec.partition(":")
    if sep and kind in ("fixed", "beta"):
        try:
            nums = [float(x) for x in arg.split(",")]
        except ValueError:
            raise ValueError(f"--pass-rate {spec!r}: expected numbers after '{kind}:'") from None
        if kind == "fixed" and len(nums) == 1:
            try:
                return FixedPassRate(_check_p(nums[0], f"--pass-rate {spec!r}"), coupling)
            except ValueError as exc:
                raise ValueError(str(exc)) from None
        if kind == "beta" and len(nums) == 2:
            try:
                return BetaPassRate(nums[0], nums[1], coupling)
            except ValueError as exc:
                raise ValueError(f"--pass-rate {spec!r}: {exc}") from None
        raise ValueError(f"--pass-rate {spec!r}: expected fixed:P or beta:A,B")
    path = Path(spec)
    if not path.exists():
        raise ValueError(f"--pass-rate {spec!r}: neither fixed:P, beta:A,B nor an existing file")
    return _from_file(path, coupling)


def _from_file(path: Path, coupling: float) -> PassRateModel:
    """Read a pass-rate file (JSON, CSV or JSONL; module docstring)."""
    name = str(path)
    if path.suffix == ".json":
        try:
            d = strict_json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{name}: not valid JSON ({exc})") from None
        block = d.get("pass_rate", d) if isinstance(d, dict) else None
        if not isinstance(block, dict):
            raise ValueError(f"{name}: field 'pass_rate': expected an object")
        c = float(block.get("coupling", coupling))
        if not math.isfinite(c):
            raise ValueError(f"{name}: field 'pass_rate.coupling' is not finite ({c})")
        if "spec" in block:
            inner = str(block["spec"]).strip()
            if not inner.startswith(("fixed:", "beta:")):
                raise ValueError(
                    f"{name}: field 'pass_rate.spec' must be fixed:P or beta:A,B, got {inner!r}"
                )
            try:
                return parse_pass_rate(inner, c)
            except ValueError as exc:
                raise ValueError(f"{name}: field 'pass_rate.spec': {exc}") from None
        if "values" in block:
            try:
                values = tuple(float(v) for v in block["values"])
            except (TypeError, ValueError):
                raise ValueError(f"{name}: field 'pass_rate.values': expected numbers") from None
            return EmpiricalPassRate(values, name, c)
        raise ValueError(f"{name}: missing field 'pass_rate.spec' or 'pass_rate.values'")
    numbered: list[tuple[int, object]] = []  # (line number in the file, 1-based; record)
    if path.suffix == ".csv":
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            if "pass_rate" not in (reader.fieldnames or []):
                raise ValueError(f"{name}: line 1 (header): no column 'pass_rate'")
            numbered = [(i + 2, row) for i, row in enumerate(reader)]
    elif path.suffix in (".jsonl", ".ndjson"):
        with open(path) as fh:
            for no, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        numbered.append((no, json.loads(line)))
                    except json.JSONDecodeError as exc:
                        raise ValueError(strict_json.jsonl_error(path, no, exc)) from None
    else:
        raise ValueError(f"{name}: unknown pass-rate file type; expected .json, .csv or .jsonl")
    rates: list[float] = []
    for no, row in numbered:
        if not isinstance(row, dict) or row.get("pass_rate") in (None, ""):
            raise ValueError(f"{name}: line {no}: missing field 'pass_rate'")
        try:
            v = float(row["pass_rate"])
        except (TypeError, ValueError):
            raise ValueError(
                f"{name}: line {no}, field 'pass_rate': not a number ({row['pass_rate']!r})"
            ) from None
        if not 0.0 <= v <= 1.0:  # NaN fails too
            raise ValueError(f"{name}: line {no}, field 'pass_rate': must be in [0, 1], got {v}")
        rates.append(v)
    return EmpiricalPassRate(tuple(rates), name, coupling)


def coupled_probs(p: np.ndarray, lengths: np.ndarray, coupling: float) -> np.ndarray:
    """``(n, G)`` per-sample correctness probabilities under length coupling.

    ``logit P_ij = logit p_i + c_i + coupling * z_ij``, ``z_ij`` the standardised log
    length within group ``i`` (0 when the group's lengths are all equal), and ``c_i``
    solved (bisection, 60 halvings) so that ``mean_j P_ij = p_i``: the group's expected
    correct count is preserved, only who is correct tilts (coupling < 0: longer responses
    are wrong more often). ``p_i`` of 0 or 1 stays 0 or 1. ``p`` is (n,), ``lengths``
    (n, G) tokens (>= 1).
    """
    p = np.asarray(p, dtype=np.float64)
    logL = np.log(np.maximum(np.asarray(lengths, dtype=np.float64), 1.0))
    sd = logL.std(axis=1, keepdims=True)
    z = np.where(sd > 0, (logL - logL.mean(axis=1, keepdims=True)) / np.where(sd > 0, sd, 1), 0.0)
    inner = (p > 0) & (p < 1)
    base = logit(np.clip(p, 1e-12, 1 - 1e-12))[:, None] + coupling * z  # (n, G)
    lo = np.full((len(p), 1), -50.0)
    hi = np.full((len(p), 1), 50.0)
    for _ in range(60):  # mean_j expit(base + c) is increasing in c
        mid = 0.5 * (lo + hi)
        above = expit(base + mid).mean(axis=1, keepdims=True) > p[:, None]
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid)
    P = expit(base + 0.5 * (lo + hi))
    return np.where(inner[:, None], P, p[:, None])


def draw_correct(
    seed: int,
    step: int,
    prompt_ids: np.ndarray,
    G: int,
    p: np.ndarray,
    lengths: np.ndarray | None = None,
    coupling: float = 0.0,
) -> np.ndarray:
    """``(n, G)`` bool: is sample ``j`` of prompt ``i`` correct at ``step``.

    Also vectorised over steps: ``step`` (T,),
    ``prompt_ids`` and ``p`` (T, n) give (T, n, G).

    ``u_ij = hash_uniform(seed, STREAM_CORRECT, step, prompt_id_i, j)``; correct when
    ``u_ij < P_ij`` with ``P_ij = p_i`` (``coupling == 0``, so sample ``j`` is the same
    whatever G) or :func:`coupled_probs` (needs ``lengths`` (n, G)). ``p`` (n,) in [0, 1].
    Raises ValueError when coupling is non-zero and ``lengths`` is missing.
    """
    pid = np.asarray(prompt_ids, dtype=np.int64)[..., None]
    steps = np.asarray(step, dtype=np.int64)
    key = int(steps) if steps.ndim == 0 else steps.reshape(-1, *([1] * (pid.ndim - 1)))
    u = hash_uniform(seed, STREAM_CORRECT, key, pid, np.arange(G))  # (..., n, G)
    p = np.asarray(p, dtype=np.float64)
    if coupling == 0.0:
        return u < p[..., None]
    if lengths is None:
        raise ValueError("draw_correct: a non-zero coupling needs the response lengths")
    P = coupled_probs(p.reshape(-1), np.asarray(lengths).reshape(-1, G), coupling)
    return u < P.reshape(u.shape)
