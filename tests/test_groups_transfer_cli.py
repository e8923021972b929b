"""``compare groups --transfer``: the table on a real trace, the same predictions from
a metrics file as from the lengths it summarises, and the option checks."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from click.testing import CliRunner

from rolloutlab.cli import main

REAL = Path(__file__).parent / "data" / "groups" / "real_sync" / "rollouts.parquet"
FAST = ("--fit-steps", "36", "--tau", "2,3", "--draws", "5", "--reps", "5")


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def metrics_of(path: Path, out: Path) -> Path:
    """verl's response_length/* per step, computed here with polars from the trace."""
    df = (
        pl.read_parquet(path)
        .group_by("step")
        .agg(
            pl.col("response_tokens").mean().alias("response_length/mean"),
            pl.col("response_tokens").max().cast(pl.Float64).alias("response_length/max"),
            pl.col("response_tokens").min().cast(pl.Float64).alias("response_length/min"),
            (pl.col("finish_reason") == "length").mean().alias("response_length/clip_ratio"),
        )
    )
    out.write_text("".join(json.dumps(r) + "\n" for r in df.sort("step").to_dicts()))
    return out


def test_transfer_aggregates_from_metrics_equals_from_lengths(tmp_path):
    a = _run("compare", "groups", REAL, *FAST, "--transfer", "aggregates", "--out", tmp_path / "a")
    assert a.exit_code == 0, a.output
    m = metrics_of(REAL, tmp_path / "m.jsonl")
    b = _run(
        "compare", "groups", REAL, *FAST, "--transfer", "aggregates",
        "--target-metrics", m, "--out", tmp_path / "b",
    )  # fmt: skip
    assert b.exit_code == 0, b.output
    ta = pl.read_csv(tmp_path / "a" / "validation_groups.csv")
    tb = pl.read_csv(tmp_path / "b" / "validation_groups.csv")
    assert ta["model"].unique().to_list() == ["transfer_aggregates"]
    assert sorted(ta["G"].unique().to_list()) == list(range(1, 9))
    assert ta["p_straggler_pred"].is_between(0, 1).all()
    assert ta["law"][0].startswith("copula rho=")
    assert ta["p_straggler_pred"].to_list() == tb["p_straggler_pred"].to_list()


def test_transfer_marginal_on_a_held_out_run(tmp_path):
    r = _run(
        "compare", "groups", REAL, "--held-out", REAL, "--from-step", "38",
        "--tau", "2", "--draws", "5", "--reps", "5", "--transfer", "marginal", "--out", tmp_path / "o",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    t = pl.read_csv(tmp_path / "o" / "validation_groups.csv")
    assert t["model"].unique().to_list() == ["transfer_marginal"] and t["n_steps"][0] == 2


def test_transfer_option_checks(tmp_path):
    m = metrics_of(REAL, tmp_path / "m.jsonl")
    for extra, words in (
        (("--target-metrics", m), "--target-metrics: needs --transfer aggregates"),
        (("--transfer", "aggregates", "--fit-window", "5"), "--transfer: one FILE"),
        (("--transfer", "marginal", "--target-metrics", m), "--target-metrics: needs"),
    ):
        r = _run("compare", "groups", REAL, *FAST, *extra, "--out", tmp_path / "o")
        assert r.exit_code == 2 and words in r.output, r.output
        assert not (tmp_path / "o").exists()
