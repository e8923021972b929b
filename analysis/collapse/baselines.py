"""Naive rules and the run-to-run floor beside a collapse prediction (``compare collapse``,
``compare horizon``): what a user would predict from the fitted runs alone, and what seed
noise leaves to any predictor.

A *cell* is one setting: ``(mechanism, S, lr)`` (``(S, lr)`` for a grid without a
``mechanism`` column). From the fit rows each cell gives its collapsed share ``freq`` and
its step ``t_cell``: the median collapse step of its collapsed fit runs, ``T + 1`` (beyond
the run) when none collapsed. A held-out run is predicted by

- ``constant`` (majority class): the fit rows' overall collapsed share as the probability,
  collapsed when it is at least 1/2; the median collapse step of every collapsed fit run;
- ``lookup``: its own cell's ``freq`` and ``t_cell`` (only where the fit saw the cell: the
  seed split);
- ``nearest``: the fitted cell of the same other keys nearest along the held-out ``axis``
  (``lr`` or ``S``) in log distance; a tie goes to the smaller value;
- ``loglinear``: along the axis, ``log t_cell`` and ``freq`` linear in the log of the axis
  between the two fitted cells that bracket the held-out value (outside the fitted range:
  the line through the two nearest), ``freq`` clipped to ``[0, 1]``, the step to
  ``[1, T + 1]``.

Every rule predicts "collapsed" where its probability is at least 1/2 (a tie counts as
collapsed). Scores (:func:`score`): ``accuracy``; ``brier`` ``mean (p - y)^2`` (Brier 1950;
``y`` 1 for a collapsed run); ``mdape_all_collapsed`` the median
``|min(t_pred, T + 1) / t - 1|`` over *every* held-out run that collapsed (a prediction
beyond the run counted at ``T + 1``, so all predictors are scored on the same runs: the
one the verdict compares); ``mdape_both_collapsed`` the same over the runs collapsed on
both sides, measured and predicted (each predictor on its own runs, so two predictors'
values are not like for like; :func:`analysis.collapse.compare.agreement`'s
``t_collapse_mdape``). Summaries written before these names hold them as ``mdape`` and
``mdape_both`` (:func:`named_scores` reads either).

Floor (:func:`floor`), read off the held-out runs themselves, so never a prediction:
``mdape`` predicting each collapsed held-out run by the median step of the *other*
collapsed held-out runs of its cell; ``accuracy`` the per-cell majority of the held-out
runs (:func:`analysis.collapse.horizon.class_ceiling`'s ceiling); ``brier`` the per-cell
held-out share (``sum n p (1 - p) / N``, the least squared error any per-cell probability
reaches); ``log_t_sd`` the pooled within-cell standard deviation of ``log t_collapse``
over collapsed held-out runs (the seed spread of a collapse step, natural log).
"""

from __future__ import annotations

import numpy as np
import polars as pl

AXES = ("lr", "S")
"""The setting axes a held-out cell may be unseen along."""
RULES = ("constant", "lookup", "nearest", "loglinear")
MDAPES = ("mdape_all_collapsed", "mdape_both_collapsed")
"""The two collapse-step MdAPEs of :func:`score`: over every collapsed held-out run (the
same runs for every predictor), over the runs collapsed on both sides (each its own)."""


def cell_keys(df: pl.DataFrame) -> list[str]:
    """The columns naming a cell: ``mechanism, S, lr`` (``S, lr`` without ``mechanism``)."""
    return (["mechanism"] if "mechanism" in df.columns else []) + ["S", "lr"]


def cells(fit_rows: pl.DataFrame, T: int) -> pl.DataFrame:
    """Per fitted cell: ``runs``, ``freq`` (collapsed share) and ``t_cell`` (median step of
    its collapsed runs; ``T + 1`` when none collapsed)."""
    return (
        fit_rows.group_by(cell_keys(fit_rows))
        .agg(
            pl.len().alias("runs"),
            pl.col("collapsed").cast(pl.Float64).mean().alias("freq"),
            pl.col("t_collapse")
            .filter(pl.col("collapsed"))
            .cast(pl.Float64)
            .median()
            .alias("t_cell"),
        )
        .with_columns(pl.col("t_cell").fill_null(float(T + 1)))
    )


def _log_axis(values, axis: str) -> np.ndarray:
    v = np.asarray(values, float)
    return np.log(np.maximum(v, 1.0) if axis == "S" else v)


def _along(target: float, xs: np.ndarray, ys: np.ndarray, rule: str) -> float:
    """``rule`` (``nearest`` / ``loglinear``) at ``target`` from points ``(xs, ys)`` (log axis,
    ``xs`` sorted ascending, distinct)."""
    if rule == "nearest":
        d = np.abs(xs - target)
        return float(ys[np.flatnonzero(d <= d.min() + 1e-9)[0]])  # tie: the smaller value
    if len(xs) == 1:
        return float(ys[0])
    i = int(np.clip(np.searchsorted(xs, target), 1, len(xs) - 1))  # the bracketing pair
    w = (target - xs[i - 1]) / (xs[i] - xs[i - 1])
    return float(ys[i - 1] + w * (ys[i] - ys[i - 1]))


def predict(
    fit_rows: pl.DataFrame, held: pl.DataFrame, T: int, axis: str | None = None
) -> dict[str, pl.DataFrame]:
    """Each rule's prediction for ``held``'s rows, ``{rule: frame}`` with columns ``p``
    (probability of collapse within ``T``), ``predicted_collapsed`` and ``predicted_t``
    (in ``held``'s row order). ``axis``: ``None`` where the fit saw every held-out cell
    (``lookup`` only; ``nearest`` and ``loglinear`` are the lookup there), else the axis
    (:data:`AXES`) its held-out cells are unseen along (``lookup`` then left out).

    Raises ValueError on an unknown axis, on a held-out cell the lookup did not see, or one
    without a fitted cell of the same other keys along ``axis``.
    """
    if axis is not None and axis not in AXES:
        raise ValueError(f"axis {axis!r}: not one of {AXES}")
    keys = cell_keys(held)
    table = cells(fit_rows, T)
    coll = fit_rows.filter(pl.col("collapsed"))
    share = float(fit_rows["collapsed"].cast(pl.Float64).mean())
    t_const = float(coll["t_collapse"].median()) if coll.height else float(T + 1)
    out: dict[str, pl.DataFrame] = {
        "constant": _frame(np.full(held.height, share), np.full(held.height, t_const))
    }
    if axis is None:
        j = held.select(keys).join(table, on=keys, how="left", maintain_order="left")
        if j["freq"].null_count():
            r = j.filter(pl.col("freq").is_null()).row(0, named=True)
            raise ValueError(f"lookup: cell {r} has no fit runs")
        out["lookup"] = _frame(j["freq"].to_numpy(), j["t_cell"].to_numpy())
        return out
    others = [k for k in keys if k != axis]
    groups = {
        g: part.sort(axis) for g, part in table.group_by(others)
    }  # why: one sorted line of fitted cells per (mechanism, other axis) value
    for rule in ("nearest", "loglinear"):
        p, t = [], []
        for row in held.select(keys).iter_rows(named=True):
            part = groups.get(tuple(row[k] for k in others))
            if part is None:
                raise ValueError(f"{rule}: no fitted cell with { ({k: row[k] for k in others}) }")
            xs = _log_axis(part[axis].to_numpy(), axis)
            x = float(_log_axis([row[axis]], axis)[0])
            p.append(_along(x, xs, part["freq"].to_numpy(), rule))
            t.append(np.exp(_along(x, xs, np.log(part["t_cell"].to_numpy()), rule)))
        out[rule] = _frame(np.clip(p, 0.0, 1.0), np.clip(t, 1.0, T + 1.0))
    return out


def _frame(p: np.ndarray, t: np.ndarray) -> pl.DataFrame:
    p = np.asarray(p, float)
    return pl.DataFrame(
        {"p": p, "predicted_collapsed": p >= 0.5, "predicted_t": np.asarray(t, float)}
    )


def score(held: pl.DataFrame, p, predicted_collapsed, predicted_t, T: int) -> dict:
    """Scores of one predictor on ``held`` (module docstring): ``runs``, ``accuracy``,
    ``brier``, ``mdape_all_collapsed`` over ``collapsed_runs`` (every collapsed held-out
    run), ``mdape_both_collapsed`` over ``both_collapsed`` runs. ``p``, ``predicted_collapsed``,
    ``predicted_t``: arrays ``(held.height,)``; NaN where a score has no run."""
    y = held["collapsed"].to_numpy().astype(bool)
    t = held["t_collapse"].cast(pl.Float64).fill_null(np.nan).to_numpy()
    p, cls = np.asarray(p, float), np.asarray(predicted_collapsed, bool)
    tp = np.minimum(np.asarray(predicted_t, float), T + 1.0)
    ape = np.abs(tp / np.where(y, t, np.nan) - 1.0)
    both = y & cls
    return {
        "runs": int(held.height),
        "accuracy": float(np.mean(cls == y)) if held.height else float("nan"),
        "brier": float(np.mean((p - y) ** 2)) if held.height else float("nan"),
        "mdape_all_collapsed": float(np.median(ape[y])) if y.any() else float("nan"),
        "collapsed_runs": int(y.sum()),
        "mdape_both_collapsed": float(np.median(ape[both])) if both.any() else float("nan"),
        "both_collapsed": int(both.sum()),
    }


def floor(held: pl.DataFrame) -> dict:
    """What seed noise leaves on ``held`` (module docstring): ``accuracy``, ``brier``,
    ``mdape`` (over ``mdape_runs``: collapsed runs whose cell has another collapsed held-out
    run) and ``log_t_sd``; NaN where undefined."""
    keys = cell_keys(held)
    if not held.height:
        nan = float("nan")
        return {"accuracy": nan, "brier": nan, "mdape": nan, "mdape_runs": 0, "log_t_sd": nan}
    per = held.group_by(keys).agg(
        pl.len().alias("n"),
        pl.col("collapsed").sum().alias("c"),
        pl.col("t_collapse").filter(pl.col("collapsed")).cast(pl.Float64).alias("t"),
    )
    n, c = per["n"].to_numpy().astype(float), per["c"].to_numpy().astype(float)
    ape, dev, dof = [], [], 0
    for ts in per["t"].to_list():
        v = np.asarray(ts, float)
        for i in range(len(v)):
            if len(v) > 1:
                ape.append(abs(np.median(np.delete(v, i)) / v[i] - 1.0))
        if len(v) > 1:
            dev.extend((np.log(v) - np.log(v).mean()) ** 2)
            dof += len(v) - 1
    return {
        "accuracy": float(np.maximum(c, n - c).sum() / n.sum()),
        "brier": float((c * (n - c) / n).sum() / n.sum()),
        "mdape": float(np.median(ape)) if ape else float("nan"),
        "mdape_runs": len(ape),
        "log_t_sd": float(np.sqrt(np.sum(dev) / dof)) if dof else float("nan"),
    }


def baseline_scores(
    fit_rows: pl.DataFrame, held: pl.DataFrame, T: int, axis: str | None = None
) -> dict:
    """``{"cells": "seen" | "unseen", "axis", "rules": {rule: score}, "floor": floor}`` for
    ``held`` against rules built from ``fit_rows`` (:func:`predict`, :func:`score`,
    :func:`floor`)."""
    preds = predict(fit_rows, held, T, axis)
    return {
        "cells": "seen" if axis is None else "unseen",
        "axis": axis,
        "rules": {
            rule: score(held, f["p"], f["predicted_collapsed"], f["predicted_t"], T)
            for rule, f in preds.items()
        },
        "floor": floor(held),
    }


LEGACY_NAMES = {"mdape": "mdape_all_collapsed", "mdape_both": "mdape_both_collapsed"}
"""Score names in summaries written before the two step MdAPEs had distinct names."""


def named_scores(scores: dict) -> dict:
    """``scores`` (one predictor's :func:`score`, as read from a summary) with the names of
    :data:`LEGACY_NAMES` replaced by today's (a summary that has both keeps today's)."""
    out = dict(scores)
    for old, new in LEGACY_NAMES.items():
        if old in out:
            out.setdefault(new, out.pop(old))
    return out


def best_rule(rules: dict, metric: str) -> tuple[str, float] | None:
    """The naive rule with the lowest ``metric`` (``brier``, ``mdape_all_collapsed``) or highest
    (``accuracy``) finite value, ``(name, value)``; None when none is finite."""
    vals = {k: v[metric] for k, v in rules.items() if v.get(metric) == v.get(metric)}
    if not vals:
        return None
    pick = max if metric == "accuracy" else min
    name = pick(vals, key=lambda k: vals[k])
    return name, float(vals[name])


RULE_NAMES = {
    "constant": "majority class / constant step",
    "lookup": "per-cell lookup (fit seeds)",
    "nearest": "nearest fitted cell",
    "loglinear": "log-linear across fitted cells",
}


def score_table(model: str, scores: dict, base: dict) -> pl.DataFrame:
    """One row per predictor on the same held-out runs: ``model`` (its :func:`score`),
    each naive rule of ``base`` (:func:`baseline_scores`) and the floor; columns
    ``predictor, cells, accuracy, brier, mdape_all_collapsed, mdape_both_collapsed``
    (:func:`verdict` says whether the model beats the best rule). The floor's ``mdape``
    (over the collapsed runs whose cell has another) goes in the all-collapsed column."""
    cells_seen = base["cells"]
    rows = [{"predictor": model, **_pick(scores), "cells": cells_seen}]
    for rule, s in base["rules"].items():
        rows.append({"predictor": RULE_NAMES.get(rule, rule), **_pick(s), "cells": cells_seen})
    f = base["floor"]
    rows.append(
        {"predictor": "run-to-run floor (held-out seeds)", "accuracy": f["accuracy"],
         "brier": f["brier"], "mdape_all_collapsed": f["mdape"], "mdape_both_collapsed": None,
         "cells": "oracle"}
    )  # fmt: skip
    return pl.DataFrame(rows, infer_schema_length=None).select(
        "predictor", "cells", "accuracy", "brier", *MDAPES
    )


def _pick(s: dict) -> dict:
    s = named_scores(s)
    return {k: s.get(k) for k in ("accuracy", "brier", *MDAPES)}


def verdict(scores: dict, rules: dict) -> str:
    """``"beats"`` / ``"does not beat"`` the best naive rule, per metric, in words: the
    collapse-step MdAPE over every collapsed held-out run (the same runs for every
    predictor, so like for like), Brier score and accuracy (a tie does not beat); then,
    where a summary has it, the MdAPE over the runs collapsed on both sides beside the same
    rule's, said to be each predictor's own runs (not a verdict). ``scores``, ``rules``:
    :func:`score` dicts (old names read, :func:`named_scores`)."""
    scores = named_scores(scores)
    rules = {k: named_scores(v) for k, v in rules.items()}
    n_all = scores.get("collapsed_runs")
    parts = []
    for metric, what in (
        ("mdape_all_collapsed",
         "step MdAPE over every collapsed held-out run"
         + (f" ({n_all}, the same for every predictor; beyond T counted as T + 1)"
            if n_all is not None else " (beyond T counted as T + 1)")),
        ("brier", "Brier"),
        ("accuracy", "accuracy"),
    ):  # fmt: skip
        best = best_rule(rules, metric)
        mine = scores.get(metric)
        if best is None or mine is None or mine != mine:
            continue
        better = mine > best[1] if metric == "accuracy" else mine < best[1]
        word = "beats" if better else "does not beat"
        name = RULE_NAMES.get(best[0], best[0])
        parts.append(f"{what}: {mine:.3f}, {word} {name} ({best[1]:.3f})")
        if metric == "mdape_all_collapsed":
            both, rule_both = scores.get("mdape_both_collapsed"), rules[best[0]]
            if both is not None and both == both:
                theirs = rule_both.get("mdape_both_collapsed")
                parts[-1] += (
                    f" [over the runs collapsed on both sides, each predictor's own: "
                    f"{both:.3f} ({scores.get('both_collapsed')} runs) against "
                    + (f"{theirs:.3f} ({rule_both.get('both_collapsed')} runs)"
                       if theirs is not None and theirs == theirs else "none")
                    + ", not like for like]"
                )  # fmt: skip
    return "; ".join(parts)
