"""Naive rules for steps to a target at unseen (G, B), beside the learning law's prediction.

A user who has run a few (G, B) settings and wants another one has rules that need no
model. Each predicts the mean steps to target of a setting from the fit settings' mean
steps (each a mean over that setting's seeds that reached the target):

- **constant**: the mean of the fit settings' means, whatever (G, B);
- **log-plane**: ``log steps = a + b log G + c log B``, least squares through the fit
  settings' means (exact through three settings that are not on one line; with G or B
  fixed across the fit settings, the minimum-norm solution puts no slope on it);
- **seed floor**: the same setting's mean over *another* group of seeds (a lookup of a
  run that has been made): how far two five-seed means of one setting lie apart, which no
  predictor of a five-seed mean can be expected to beat.

Errors are relative, ``(predicted - measured) / measured``, on steps (machine-free).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import polars as pl

Setting = tuple[int, int]
"""``(G, B)``."""

TIE_TOLERANCE = 1e-9
"""Relative errors closer than this are a tie (floating-point noise of the plane's fit),
and a tie does not count as the law beating the rule."""


def setting_means(runs: pl.DataFrame) -> dict[Setting, float]:
    """``{(G, B): mean steps}`` over the runs of each setting that reached the target.

    ``runs``: columns ``G, B, steps`` (steps to target, null = never reached). A setting none
    of whose runs reached the target is left out."""
    reached = runs.filter(pl.col("steps").is_not_null())
    means = reached.group_by("G", "B").agg(pl.col("steps").cast(pl.Float64).mean())
    return {(int(g), int(b)): float(s) for g, b, s in means.iter_rows()}


def constant_rule(fit: Mapping[Setting, float]) -> float:
    """The mean of the fit settings' mean steps (steps). Raises ValueError when ``fit`` is
    empty."""
    if not fit:
        raise ValueError("constant rule: no fit setting reached the target")
    return float(np.mean(list(fit.values())))


def log_plane(fit: Mapping[Setting, float]) -> np.ndarray:
    """``(a, b, c)`` of ``log steps = a + b log G + c log B``, least squares through the fit
    settings' means (module docstring). Raises ValueError when ``fit`` is empty."""
    if not fit:
        raise ValueError("log-plane rule: no fit setting reached the target")
    logs = np.log(np.array(list(fit), float))  # (k, 2): log G, log B
    centre = logs.mean(axis=0)
    # centred, a column of a fixed G (or B) is zero, so the minimum-norm slope on it is 0
    X = np.column_stack([np.ones(len(logs)), logs - centre])  # (k, 3)
    coef, *_ = np.linalg.lstsq(X, np.log(np.array(list(fit.values()))), rcond=None)
    return np.array([coef[0] - coef[1:] @ centre, *coef[1:]])


def plane_steps(coef: np.ndarray, G: int, B: int) -> float:
    """Steps the log-plane ``coef`` (:func:`log_plane`) predicts at ``(G, B)``."""
    return float(np.exp(coef[0] + coef[1] * np.log(G) + coef[2] * np.log(B)))


def baseline_table(
    measured: Mapping[Setting, float],
    law: Mapping[Setting, float],
    fit: Mapping[Setting, float],
    floor: Mapping[Setting, float] | None = None,
    step_cost_s: Mapping[Setting, float] | None = None,
    measured_time_s: Mapping[Setting, float] | None = None,
) -> pl.DataFrame:
    """One row per setting of ``measured`` (sorted by B, then G): ``G, B, role`` ("fit
    setting" when in ``fit``, else "held out"), ``measured_steps``, then for the law and each
    rule its predicted steps and ``*_error`` (relative), and ``best_naive`` (the naive rule
    with the smallest |error|, the floor not counted: it is a lookup of runs made) and
    ``law_beats_naive`` (the law's |error| below it by more than :data:`TIE_TOLERANCE`;
    null without a law prediction).

    ``measured``: ``{(G, B): mean steps}`` of the predicted runs; ``law``: the law's
    predicted mean steps per setting; ``fit``: the fit settings' mean steps (the rules'
    input); ``floor``: the same settings' means over another seed group (column null where
    absent). With ``step_cost_s`` (the law's own cost model: s per step of each setting) and
    ``measured_time_s`` (the measured mean time to target), every rule is also priced, its
    steps times the setting's step cost: ``measured_time_s`` and ``*_time_error`` for the
    law, the constant and the log-plane (the floor's seeds ran in another session, whose
    clock differs). Raises ValueError (from the rules) when ``fit`` is empty."""
    level, plane = constant_rule(fit), log_plane(fit)
    rows = []
    for (G, B), m in sorted(measured.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        preds = {
            "law": law.get((G, B)),
            "constant": level,
            "log_plane": plane_steps(plane, G, B),
            "seed_floor": None if floor is None else floor.get((G, B)),
        }
        row: dict = {"G": G, "B": B, "role": "fit setting" if (G, B) in fit else "held out",
                     "measured_steps": m}  # fmt: skip
        for name, p in preds.items():
            row[f"{name}_steps"] = p
            row[f"{name}_error"] = None if p is None else (p - m) / m
        if step_cost_s is not None and measured_time_s is not None:
            mt, cost = measured_time_s.get((G, B)), step_cost_s.get((G, B))
            row["measured_time_s"] = mt
            for name in ("law", "constant", "log_plane"):
                p = preds[name]
                row[f"{name}_time_error"] = (
                    None if p is None or mt is None or cost is None else (p * cost - mt) / mt
                )
        naive = {k: abs(row[f"{k}_error"]) for k in ("constant", "log_plane")}
        row["best_naive"] = min(naive, key=naive.__getitem__)
        # a tie within rounding (the law and the plane both at 40 steps) is not a win
        row["law_beats_naive"] = (
            None
            if preds["law"] is None
            else abs(row["law_error"]) < min(naive.values()) - TIE_TOLERANCE
        )
        rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)


def pooled_errors(table: pl.DataFrame, role: str = "held out") -> dict[str, float | None]:
    """``{predictor: mean |relative error|}`` of the steps over ``table``'s rows of ``role``
    (None where a predictor has no value on some of them); ``{predictor}_time`` likewise for
    the priced columns when the table has them."""
    rows = table.filter(pl.col("role") == role)
    out: dict[str, float | None] = {}
    names = [f"{n}_error" for n in ("law", "constant", "log_plane", "seed_floor")]
    names += [c for c in rows.columns if c.endswith("_time_error")]
    for col in names:
        err = rows[col]
        key = col.removesuffix("_error")
        out[key] = None if err.null_count() or err.len() == 0 else float(err.abs().mean())
    return out
