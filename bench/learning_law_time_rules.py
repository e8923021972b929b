"""Naive time rules beside the learning law's first attempt (``results/learning_law/``).

The first attempt (docs/learning.md, "The first attempt") fitted the law on seeds 0-1 of
(G, B) = (4, 4), (16, 4), (8, 8) and predicted the time to a trailing training reward of
0.30 (``learning_comparison.csv``) and 0.33 (``target_0.33/``) at the held-out settings
(8, 4), (4, 8), (16, 8), seeds 0-2. Two naive rules from the six fit runs only:

- constant time: their mean measured time to target (CPU seconds);
- constant steps x rollouts: their mean steps to target x their mean CPU seconds per
  rollout (time / (steps x B x G)) x the held-out setting's B x G.

Prints, per target and held-out setting, the error of the mean over seeds of the law's
prediction and of each rule against the mean measured time (percent).

Usage: python bench/learning_law_time_rules.py [--dir results/learning_law]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl

FIT = {(4, 4), (16, 4), (8, 8)}
HELD_OUT = ((8, 4), (4, 8), (16, 8))


def settings(path: Path) -> pl.DataFrame:
    """``learning_comparison.csv`` with G, B and seed parsed from run names ``gG_bB_sS``."""
    df = pl.read_csv(path)
    pat = r"g(\d+)_b(\d+)_s(\d+)"
    return df.with_columns(
        pl.col("run").str.extract(pat, 1).cast(pl.Int64).alias("G"),
        pl.col("run").str.extract(pat, 2).cast(pl.Int64).alias("B"),
        pl.col("run").str.extract(pat, 3).cast(pl.Int64).alias("seed"),
    )


def rules(df: pl.DataFrame) -> list[dict[str, float]]:
    """One dict per held-out setting: measured mean time (s) and the relative errors of
    the law and the two rules. Raises ValueError unless the six fit runs are present."""
    is_fit = pl.struct("G", "B").map_elements(lambda r: (r["G"], r["B"]) in FIT, return_dtype=bool)
    fit = df.filter(is_fit & (pl.col("seed") <= 1))
    if fit.height != 6:
        raise ValueError(f"expected the 6 fit runs, found {fit.height}")
    const_t = fit["measured_time_to_target_s"].mean()
    steps = fit["measured_steps_to_target"].mean()
    per_rollout = (
        fit["measured_time_to_target_s"] / (fit["measured_steps_to_target"] * fit["G"] * fit["B"])
    ).mean()
    out = []
    for g, b in HELD_OUT:
        h = df.filter((pl.col("G") == g) & (pl.col("B") == b))
        m = h["measured_time_to_target_s"].mean()
        out.append(
            {
                "G": g,
                "B": b,
                "measured_s": m,
                "law": h["predicted_time_to_target_s"].mean() / m - 1,
                "constant_time": const_t / m - 1,
                "steps_x_rollouts": steps * g * b * per_rollout / m - 1,
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=Path("results/learning_law"))
    args = ap.parse_args()
    for target, path in (
        ("0.30", args.dir / "learning_comparison.csv"),
        ("0.33", args.dir / "target_0.33" / "learning_comparison.csv"),
    ):
        try:
            table = rules(settings(path))
        except (FileNotFoundError, ValueError, pl.exceptions.PolarsError) as exc:
            raise SystemExit(f"{path}: {str(exc).splitlines()[0]}") from None
        for r in table:
            print(
                f"target {target} ({r['G']}, {r['B']}): measured {r['measured_s']:.2f} s, "
                f"law {100 * r['law']:+.0f} %, constant time {100 * r['constant_time']:+.0f} %, "
                f"constant steps x rollouts {100 * r['steps_x_rollouts']:+.0f} %"
            )


if __name__ == "__main__":
    main()
