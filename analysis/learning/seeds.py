"""Several seeds per controller in ``rolloutlab compare learning``: runs of the same
controller and settings are one group; per group the measured time to target's mean and
seed-to-seed sd sit beside the prediction's error (docs/real_task.md).

A group is the runs whose ``config.json`` ``config`` block is equal once ``seed`` is
removed (in an asynchronous run's nested ``sync`` block too): the seed changes the
prompts, the sampling and the minibatch order, nothing else. Its label is the
controller, plus the settings that tell it apart from another group of the same
controller (``static:8 lr=0.0001``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

GROUP_COLUMNS = [
    "controller",
    "runs",
    "reached",
    "measured_mean_s",
    "measured_sd_s",
    "predicted_mean_s",
    "rel_error",
    "seed_spread_rel",
    "error_within_spread",
    "measured_steps_mean",
    "predicted_steps_mean",
    "measured_rank",
    "predicted_rank",
]
"""Columns of ``learning_comparison_by_controller.csv`` (:func:`group_table`)."""


def settings_key(run_dir: Path) -> dict:
    """The run's ``config`` block without ``seed`` (flattened ``a.b`` keys). Raises
    ValueError naming a directory without a readable config.json."""
    path = Path(run_dir) / "config.json"
    try:
        cfg = json.loads(path.read_text())["config"]
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"{path}: no readable 'config' block ({exc})") from None
    flat: dict = {}

    def walk(d: dict, prefix: str) -> None:
        for k, v in d.items():
            if k == "seed" and prefix in ("", "sync."):
                continue
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            else:
                flat[f"{prefix}{k}"] = v

    walk(cfg, "")
    return flat


def group_labels(run_dirs: list[Path], controllers: list[str]) -> list[str]:
    """One label per run (module docstring): runs with equal settings share it."""
    keys = [settings_key(d) for d in run_dirs]
    distinct: list[dict] = []
    for k in keys:
        if k not in distinct:
            distinct.append(k)
    labels = []
    for k, ctl in zip(keys, controllers, strict=True):
        rivals = [o for o in distinct if o is not k and o != k and o.get("controller") == ctl]
        diff = sorted({f for o in rivals for f in set(k) | set(o) if k.get(f) != o.get(f)})
        extra = " ".join(f"{f.split('.')[-1]}={k.get(f)}" for f in diff)
        labels.append(f"{ctl} {extra}".strip())
    return labels


def _mean(v: list[float]) -> float | None:
    return float(np.mean(v)) if v else None


def ranks(values: list[float | None]) -> list[int]:
    """1 = smallest; None (never reached) after every number, ties in input order."""
    key = [np.inf if v is None else v for v in values]
    order = np.argsort(key, kind="stable")
    ranks = np.empty(len(key), dtype=int)
    ranks[order] = np.arange(1, len(key) + 1)
    return ranks.tolist()


def group_table(runs: pl.DataFrame) -> pl.DataFrame:
    """Per group of ``runs`` (the per-run table with a ``group`` column, and
    ``measured/predicted_time_to_target_s``, ``measured/predicted_steps_to_target``):
    :data:`GROUP_COLUMNS`, in order of first appearance.

    ``measured_mean_s`` / ``measured_sd_s``: mean and sample sd (ddof 1; null with one
    run) over the runs that reached the target (``reached`` of ``runs``);
    ``predicted_mean_s``: mean of those runs' own predictions (null when none reached or
    none of their predictions reaches it); steps likewise;
    ``rel_error = predicted_mean_s / measured_mean_s - 1``; ``seed_spread_rel =
    measured_sd_s / measured_mean_s``; ``error_within_spread``: ``|predicted_mean_s -
    measured_mean_s| < measured_sd_s``. Ranks on the means (1 = fastest; never = last).
    With ``constant_steps_time_to_target_s`` in ``runs`` (the naive rule of
    :func:`analysis.learning.compare.fit_steps_to_target`) two more: ``constant_mean_s``
    (its mean over the reached runs) and ``constant_rel_error``.
    With ``resim_time_to_target_s`` in ``runs`` (re-simulated controllers) two more:
    ``resim_mean_s`` (mean over the reached runs' re-simulated predictions; null for
    static runs) and ``resim_rel_error``.
    """
    resim = "resim_time_to_target_s" in runs.columns
    naive = "constant_steps_time_to_target_s" in runs.columns
    rows = []
    for (label,), g in runs.group_by("group", maintain_order=True):
        ok = g.filter(pl.col("measured_time_to_target_s").is_not_null())
        meas = ok["measured_time_to_target_s"].to_list()
        pred = [v for v in ok["predicted_time_to_target_s"].to_list() if v is not None]
        m, p = _mean(meas), _mean(pred)
        sd = float(np.std(meas, ddof=1)) if len(meas) > 1 else None
        err = None if m is None or p is None else p / m - 1
        rows.append(
            {
                "controller": label,
                "runs": g.height,
                "reached": ok.height,
                "measured_mean_s": m,
                "measured_sd_s": sd,
                "predicted_mean_s": p,
                "rel_error": err,
                "seed_spread_rel": None if sd is None or not m else sd / m,
                "error_within_spread": (
                    None if m is None or p is None or sd is None else abs(p - m) < sd
                ),
                "measured_steps_mean": _mean(ok["measured_steps_to_target"].to_list()),
                "predicted_steps_mean": _mean(
                    [v for v in ok["predicted_steps_to_target"].to_list() if v is not None]
                ),
            }
        )
        if naive:
            c = _mean([v for v in ok["constant_steps_time_to_target_s"].to_list() if v is not None])
            rows[-1] |= {"constant_mean_s": c,
                         "constant_rel_error": None if c is None or m is None else c / m - 1}  # fmt: skip
        if resim:
            r = _mean([v for v in ok["resim_time_to_target_s"].to_list() if v is not None])
            rows[-1] |= {"resim_mean_s": r, "resim_rel_error": None if r is None or m is None else r / m - 1}  # fmt: skip
    table = pl.DataFrame(
        rows,
        schema_overrides={
            c: pl.Float64
            for c in GROUP_COLUMNS
            if c.endswith(("_s", "_error", "_rel", "_mean")) and c != "controller"
        }
        | {
            "error_within_spread": pl.Boolean,
            "resim_mean_s": pl.Float64,
            "resim_rel_error": pl.Float64,
            "constant_mean_s": pl.Float64,
            "constant_rel_error": pl.Float64,
        },  # fmt: skip
    )
    return table.with_columns(
        pl.Series("measured_rank", ranks(table["measured_mean_s"].to_list())),
        pl.Series("predicted_rank", ranks(table["predicted_mean_s"].to_list())),
    ).select(
        *GROUP_COLUMNS,
        *(["resim_mean_s", "resim_rel_error"] if resim else []),
        *(["constant_mean_s", "constant_rel_error"] if naive else []),
    )
