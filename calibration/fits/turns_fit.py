"""Fit a scenario's ``multi_turn`` block (:mod:`sim.models.turns`) to a log with per-turn
timing: a turns table (:mod:`sim.trace.turns`, parquet or JSONL), as ``rolloutlab sim``
writes it and as a real multi-turn run would (docs/multi_turn.md, "Calibrating").

What is fitted, each from the turns table alone:

- turn law: :func:`calibration.fits.turn_law_fit.fit_turn_law` (``fixed``, a truncated
  geometric from 1 or from the observed minimum, or the empirical table: least AIC);
- tool latency: :func:`sim.models.turns.fit_tool_latency` on each call's run time
  ``t_tool_end - t_tool_start`` (sandbox queueing excluded), calls ended by a timeout
  entering right-censored at the timeout;
- timeout: the median run time of the timed-out calls (none: no timeout);
- sandboxes: the most calls ever running at once, when some call queued for a sandbox
  (``t_tool_start > t_tool_request``: the limit was reached), else unlimited;
- tool output tokens: the median context growth between turns less the turn's response;
- turn length scale: median turn response over the median of the base scenario's
  length model (both in tokens).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from rolloutlab.calibration.fits.turn_law_fit import fit_turn_law
from rolloutlab.sim.models.turns import fit_tool_latency
from rolloutlab.sim.trace.schema import TraceError
from rolloutlab.sim.trace.turns import validate_turns


def read_turns(path: str | Path) -> pl.DataFrame:
    """A validated turns table from ``.parquet`` or ``.jsonl``. Raises TraceError naming
    the file (missing, unreadable, another format, a bad row)."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{p}: no such turns file")
    try:
        if p.suffix == ".parquet":
            df = pl.read_parquet(p)
        elif p.suffix in (".jsonl", ".ndjson"):
            df = pl.read_ndjson(p, infer_schema_length=None)
        else:
            raise TraceError(f"{p}: unknown turns format; expected .parquet or .jsonl")
    except TraceError:
        raise
    except Exception as exc:  # polars/arrow raise several types on a damaged file
        raise TraceError(f"{p}: not a readable turns table ({type(exc).__name__})") from None
    return validate_turns(df, str(p))


def max_concurrent(start: np.ndarray, end: np.ndarray) -> int:
    """Most intervals ``[start_i, end_i)`` open at one time (a sweep over the events,
    ends before starts at equal times)."""
    if len(start) == 0:
        return 0
    t = np.concatenate([start, end])
    d = np.concatenate([np.ones(len(start)), -np.ones(len(end))])
    order = np.lexsort((d, t))
    return int(np.cumsum(d[order]).max())


def fit_multi_turn(turns: pl.DataFrame, base_median_tokens: float, source: str) -> dict[str, Any]:
    """The ``multi_turn`` JSON block fitted to ``turns`` (module docstring) and a ``fit``
    record (counts, observed quantiles). Raises ValueError naming ``source`` when the
    table holds fewer than 3 tool calls."""
    keys = ["run_id", "step", "prompt_id", "sample_idx"]
    per = turns.group_by(keys).agg(pl.len().alias("n"))
    n = per["n"].to_numpy()
    turn_law, turn_aic = fit_turn_law(n)
    calls = turns.filter(pl.col("t_tool_end").is_not_null())
    if calls.height < 3:
        raise ValueError(f"{source}: {calls.height} tool calls; need >= 3 to fit a latency law")
    run_s = (calls["t_tool_end"] - calls["t_tool_start"]).to_numpy()
    timed_out = (calls["finish_reason"] == "tool_timeout").to_numpy()
    timeout = float(np.median(run_s[timed_out])) if timed_out.any() else None
    law = fit_tool_latency(run_s, censor_s=timeout)
    queued = bool((calls["t_tool_start"] > calls["t_tool_request"]).any())
    limit = max_concurrent(calls["t_tool_start"].to_numpy(), calls["t_tool_end"].to_numpy())
    nxt = turns.sort(*keys, "turn").with_columns(
        (pl.col("context_tokens").shift(-1).over(keys) - pl.col("context_tokens") - pl.col("response_tokens")).alias("grow")
    )  # fmt: skip
    grow = nxt["grow"].drop_nulls()
    scale = float(turns["response_tokens"].median()) / base_median_tokens
    block = {
        "turns": turn_law.to_dict(),
        "tool_latency": {
            "law": "lognormal",
            "min_s": law.min_s,
            "scale_s": law.scale_s,
            "sigma": law.sigma,
        },
        "sandboxes": limit if queued else None,
        "timeout_s": timeout,
        "tool_output_tokens": int(np.median(grow.to_numpy())) if len(grow) else 0,
        "turn_length_scale": scale,
    }
    fit = {
        "rollouts": int(len(n)),
        "turns": int(turns.height),
        "tool_calls": int(calls.height),
        "turn_law_aic": turn_aic,
        "timed_out_calls": int(timed_out.sum()),
        "tool_run_s_quantiles": {
            q: float(np.quantile(run_s, float(q))) for q in ("0.5", "0.9", "0.99")
        },
        "max_concurrent_calls": limit,
        "queued_calls": int((calls["t_tool_start"] > calls["t_tool_request"]).sum()),
    }
    return {"multi_turn": block, "fit": fit}


def calibrate_turns(turns_path: str | Path, base: str) -> dict[str, Any]:
    """A calibration dict: scenario ``base`` (a file or bundled name: its lengths, cost,
    engine) with the ``multi_turn`` block fitted to the turns table at ``turns_path``
    (:func:`fit_multi_turn`), validated by loading it back. Raises TraceError,
    CalibrationError or ValueError naming the file and field."""
    import json

    from rolloutlab.sim.scenario.scenario import load_scenario, scenario_from_dict

    sc = load_scenario(base)
    turns = read_turns(turns_path)
    draws = sc.lengths.sample_ids(0, 0, np.arange(4000), 1)
    fitted = fit_multi_turn(turns, float(np.median(draws)), str(turns_path))
    d = json.loads(json.dumps(sc.source))
    d["name"] = f"{sc.name}_turns"
    d["multi_turn"] = fitted["multi_turn"]
    d["provenance"] = {
        "kind": "turns",
        "turns_file": str(turns_path),
        "base": sc.name,
        "base_provenance": sc.source.get("provenance"),
    }
    d["fit"] = {**(d.get("fit") or {}), "multi_turn": fitted["fit"]}
    scenario_from_dict(d, str(turns_path))  # the block must load (CalibrationError otherwise)
    return d
