"""``rolloutlab calibrate servegen``: a long-reasoning scenario from ServeGen's DeepSeek-R1
output-length distributions, with a cost model from a verl calibration.

ServeGen (Alibaba Bailian, arXiv 2505.09999; ``data/reason/deepseek-r1``) publishes, per
API client ``i`` and 6-hour window ``w``, an empirical PMF of ``output_tokens``
(reasoning + answer) in ``chunk-<i>-dataset.json`` (Python-dict strings, parsed with
``ast.literal_eval``), and the client's request rate per 600 s in ``chunk-<i>-trace.csv``
(no header: ``timestamp, rate, cv, pattern, arg1, arg2``).

Pooled PMF: ``p(L) = sum_{i,w} N_{i,w} p_{i,w}(L) / sum N_{i,w}`` with
``N_{i,w} = sum over the trace rows of client i with timestamp in [w, w + 21600) of
rate * 600`` (expected requests), i.e. the output-length distribution of a random
request. The length model is ``empirical``: ``values`` are the pooled quantiles at
``(j + 1/2) / n_values``, so resampling them draws from the pooled PMF (to within
``1 / n_values`` in probability). ServeGen has one response per request, no groups:
samples of a group are i.i.d. here (no within-group correlation; documented limit).
"""

from __future__ import annotations

import ast
import csv
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from rolloutlab.calibration.scenarios.writer import calibration_dict, source_entry
from rolloutlab.sim.models.dynamics import pmf_quantiles
from rolloutlab.sim.scenario.scenario import load_scenario

WINDOW_S = 21600
TRACE_ROW_S = 600


class ServeGenError(ValueError):
    """ServeGen input that cannot be used; the message names the file and field."""


def _parse_pmf(text: str, path: Path, where: str) -> dict[int, float]:
    try:
        pmf = ast.literal_eval(text)
    except (ValueError, SyntaxError) as exc:
        raise ServeGenError(f"{path}: field {where}: not a Python dict literal ({exc})") from None
    if not isinstance(pmf, dict) or not pmf:
        raise ServeGenError(f"{path}: field {where}: expected a non-empty dict")
    out = {}
    for k, v in pmf.items():
        if not isinstance(k, int) or k < 1 or not isinstance(v, (int, float)) or not (v >= 0):
            raise ServeGenError(
                f"{path}: field {where}: bad entry {k!r}: {v!r} "
                f"(expected int tokens >= 1 -> probability >= 0)"
            )
        out[k] = float(v)
    return out


def _window_requests(trace: Path) -> dict[int, float]:
    """Expected requests per 6-hour window start: sum of rate * 600 s."""
    counts: dict[int, float] = {}
    if not trace.exists():
        raise ServeGenError(f"{trace}: missing trace file (needed for request weights)")
    with open(trace, newline="") as f:
        for row_no, row in enumerate(csv.reader(f), start=1):
            try:
                ts, rate = float(row[0]), float(row[1] or 0.0)
            except (IndexError, ValueError):
                raise ServeGenError(
                    f"{trace}: row {row_no}: fields timestamp, rate: "
                    f"expected numbers, got {row[:2]!r}"
                ) from None
            if not (rate >= 0):
                raise ServeGenError(f"{trace}: row {row_no}: field rate is {rate} (expected >= 0)")
            w = int(ts // WINDOW_S) * WINDOW_S
            counts[w] = counts.get(w, 0.0) + rate * TRACE_ROW_S
    return counts


def pooled_output_pmf(folder: str | Path) -> tuple[np.ndarray, np.ndarray, list[Path]]:
    """Request-weighted pooled PMF of ``output_tokens`` over every client and window.

    Returns ``(tokens, prob, files)``: sorted ``(K,)`` token counts, ``(K,)``
    probabilities summing to 1, and the files read. Raises :class:`ServeGenError`
    (file and field named) on a missing folder/file, bad JSON or a bad PMF.
    """
    folder = Path(folder)
    datasets = sorted(folder.glob("chunk-*-dataset.json"))
    if not datasets:
        raise ServeGenError(f"{folder}: no chunk-*-dataset.json files")
    total: dict[int, float] = {}
    files: list[Path] = []
    for ds in datasets:
        trace = ds.with_name(ds.name.replace("-dataset.json", "-trace.csv"))
        weights = _window_requests(trace)
        try:
            data = json.loads(ds.read_text())
        except json.JSONDecodeError as exc:
            raise ServeGenError(f"{ds}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
        for window, entry in data.items():
            n = weights.get(int(window), 0.0)
            if n <= 0:
                continue
            if not isinstance(entry, dict) or "output_tokens" not in entry:
                raise ServeGenError(f"{ds}: window {window}: missing field 'output_tokens'")
            pmf = _parse_pmf(entry["output_tokens"], ds, f"{window}.output_tokens")
            s = sum(pmf.values())
            for k, v in pmf.items():
                total[k] = total.get(k, 0.0) + n * v / s
        files += [ds, trace]
    if not total:
        raise ServeGenError(f"{folder}: no window with requests")
    tokens = np.array(sorted(total), dtype=np.int64)
    prob = np.array([total[k] for k in tokens])
    return tokens, prob / prob.sum(), files


@dataclass(frozen=True)
class LongCotConfig:
    """Choices of the long-reasoning scenario (see ``docs/calibration.md``)."""

    max_response_length: int = 32768
    """Cap in tokens (ServeGen's longest output is 32768)."""
    n_values: int = 4096
    """Quantile grid size of the empirical length model."""
    kv_s_per_token: float = 4.6e-9
    """Floor on ``c_s`` (s per context token per iteration): KV-cache bytes per token /
    HBM bandwidth = 36,864 B (Qwen2.5-3B: 36 layers x K,V x 2 heads x 128 x bf16) /
    8 TB/s (two H20 at TP 2). GSM8K contexts (< 1.2k tokens) cannot identify ``c_s``;
    32k contexts make it matter."""
    prompt_tokens: int | None = None
    """Prompt length (tokens); None = the base calibration's (ServeGen inputs are API
    chat contexts, not RL prompts)."""


def build_longcot(
    folder: str | Path, base: str | Path, cfg: LongCotConfig, defaults: dict, name: str = "longcot"
) -> dict:
    """Calibration dict: ServeGen lengths + ``base`` scenario's cost and engine.

    Raises :class:`ServeGenError` or :class:`sim.scenario.scenario.CalibrationError`.
    """
    tokens, prob, files = pooled_output_pmf(folder)
    values = np.minimum(pmf_quantiles(tokens, prob, cfg.n_values), cfg.max_response_length)
    base_sc = load_scenario(base)
    cost = base_sc.cost.to_dict()
    cost["c_s"] = max(cost["c_s"], cfg.kv_s_per_token)
    cdf = np.cumsum(prob)
    quant = {
        f"p{int(q * 1000) / 10:g}": int(tokens[np.searchsorted(cdf, q)])
        for q in (0.1, 0.5, 0.9, 0.99, 0.999)
    }
    return calibration_dict(
        name=name,
        lengths={
            "kind": "empirical",
            "values": [int(v) for v in values],
            "max_response_length": cfg.max_response_length,
        },
        prompt_tokens=cfg.prompt_tokens or base_sc.prompt_tokens,
        cost=cost,
        engine=asdict(base_sc.engine),
        defaults=defaults,
        provenance={
            "kind": "servegen",
            "sources": [source_entry(f) for f in files],
            "origin": "https://github.com/alibaba/ServeGen data/reason/deepseek-r1 "
            "@ f891d1189eb32b3868dfc443800c4150548c282a (Apache-2.0)",
            "cost_from": str(base),
            "cost_from_provenance": base_sc.source.get("provenance", {}),
            "config": asdict(cfg),
        },
        fit={
            "pooled_output_tokens": {
                **quant,
                "mean": float(tokens @ prob),
                "support": int(len(tokens)),
            },
            "c_s_floor_applied": base_sc.cost.c_s < cfg.kv_s_per_token,
        },
    )
