"""``compare groups --transfer``: the table on a real trace, the same predictions from
a metrics file as from the lengths it summarises, the same-information rule (rho = 0)
against exact enumeration and its verdict line, and the option checks."""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from rolloutlab.analysis.groups.compare import against_rho0

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
    models = ["transfer_aggregates", "transfer_aggregates_rho0"]
    assert ta["model"].unique(maintain_order=True).to_list() == models
    assert sorted(ta["G"].unique().to_list()) == list(range(1, 9))
    assert ta["p_straggler_pred"].is_between(0, 1).all()
    assert ta["law"][0].startswith("copula rho=") and ta["law"][-1] == "naive rho=0, aggregates"
    assert ta["p_straggler_pred"].to_list() == tb["p_straggler_pred"].to_list()


def test_transfer_marginal_on_a_held_out_run(tmp_path):
    r = _run(
        "compare", "groups", REAL, "--held-out", REAL, "--from-step", "38",
        "--tau", "2", "--draws", "5", "--reps", "5", "--transfer", "marginal", "--out", tmp_path / "o",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    t = pl.read_csv(tmp_path / "o" / "validation_groups.csv")
    models = ["transfer_marginal", "transfer_marginal_rho0"]
    assert t["model"].unique(maintain_order=True).to_list() == models and t["n_steps"][0] == 2
    assert "transfer_marginal against the same-information rule" in r.output


def write_step(folder: Path, step: int, groups: list[list[int]]) -> Path:
    """One step of a group-per-line length log (``packed_lengths_step_N.jsonl``)."""
    folder.mkdir(exist_ok=True)
    path = folder / f"packed_lengths_step_{step}.jsonl"
    lines = [{"local_index": i, "input": 5, "output": g} for i, g in enumerate(groups)]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def test_rho0_rule_is_the_target_step_subsampled_without_replacement(tmp_path):
    src = tmp_path / "source"
    for step, groups in enumerate(([[2, 3], [5, 40]], [[1, 1], [7, 30]], [[4, 6], [2, 50]])):
        write_step(src, step, groups)
    target = write_step(tmp_path / "target", 0, [[1, 2], [3, 9]])
    taus = (1.4, 1.55)
    r = _run(
        "compare", "groups", src, "--held-out", target, "--tau", ",".join(map(str, taus)),
        "--draws", "20", "--reps", "20000", "--transfer", "marginal", "--out", tmp_path / "o",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    t = pl.read_csv(tmp_path / "o" / "validation_groups.csv")
    naive = t.filter(pl.col("model") == "transfer_marginal_rho0")
    pairs = list(itertools.combinations([1, 2, 3, 9], 2))  # G = 1, B = 2: 2 of the 4 lengths
    for tau in taus:
        want = sum(max(p) / statistics.median(p) > tau for p in pairs) / len(pairs)
        got = naive.filter((pl.col("tau") == tau) & (pl.col("G") == 1))["p_straggler_pred"][0]
        assert abs(got - want) < 4 * (want * (1 - want) / 20_000) ** 0.5
    # at the logged G and B both rebuild the logged step: max/median = 9 / 2.5 > every tau
    assert (t.filter(pl.col("G") == 2)["p_straggler_pred"] == 1.0).all()
    assert "of 4; |error| lower in" in r.output


def verdict_table(law: list[float], naive: list[float]) -> pl.DataFrame:
    cells = [(tau, g) for tau in (2.0, 3.0) for g in (1, 2)]
    rows = [
        {"model": m, "tau": tau, "G": g, "abs_error": e}
        for m, errs in (("transfer_marginal", law), ("transfer_marginal_rho0", naive))
        for (tau, g), e in zip(cells, errs, strict=True)
    ]
    return pl.DataFrame(rows)


@pytest.mark.parametrize(
    ("law", "naive", "words", "verdict"),
    [
        # worst 0.30 > 0.20, though 3 cells within 0.10 against 2; lower only in cell 1
        (
            [0.02, 0.30, 0.05, 0.08],
            [0.20, 0.12, 0.052, 0.01],
            "lower in 1, higher in 2, within 0.005 in 1 cells",
            "does not beat it",
        ),
        (
            [0.20, 0.09, 0.052, 0.01],
            [0.02, 0.30, 0.05, 0.08],
            "largest |error| 0.200 against 0.300; cells within 0.10: 3 against 3 of 4; |error| "
            "lower in 2, higher in 1, within 0.005 in 1",
            "beats it",
        ),
        # lower worst error but fewer cells within 0.10: not a win
        ([0.11, 0.11, 0.0, 0.0], [0.05, 0.05, 0.05, 0.12], "2 against 3 of 4", "does not beat it"),
    ],
)
def test_against_rho0_scores_as_the_plan_says(law, naive, words, verdict):
    line = against_rho0(verdict_table(law, naive), "marginal")
    assert words in line and line.endswith(f"cells: {verdict}"), line
