"""calibration.validation.run_spread and ``compare run-spread``: the straggler probability of
several runs and each run's distance from the others' mean."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from rolloutlab.calibration.readers.grouped import GroupedDataError
from rolloutlab.calibration.validation.groups import measure
from rolloutlab.calibration.validation.run_spread import COLUMNS, run_spread, with_target

from rolloutlab.cli import main
from tests.groups_helpers import drifting_trace, rows_trace

DATA = Path(__file__).parent / "data" / "groups"


def test_identical_runs_have_no_spread_and_other_runs_some():
    a = drifting_trace(1, steps=30)
    t = run_spread([a, a], (3.0, 5.0), draws=20)
    assert t.columns == list(COLUMNS) and t.height == 2 * 4 * 2
    assert t["dev_from_others"].max() == 0.0
    b = drifting_trace(2, steps=30)
    t2 = run_spread([a, b, a], (3.0,), from_step=10, draws=20)
    assert set(t2["n_steps"]) == {20}
    assert t2["dev_from_others"].max() > 0


def test_dev_is_the_distance_from_the_mean_of_the_others():
    runs = [drifting_trace(s, steps=12) for s in (1, 2, 3)]
    t = run_spread(runs, (4.0,), draws=30, seed=3).filter(pl.col("G") == 2)
    mats = [[np.stack(g) for g in r.groups("length")] for r in runs]
    p = [measure(m, 16, 2, (4.0,), 30, 3).p[4.0] for m in mats]
    for i in range(3):
        row = t.filter(pl.col("run") == i).row(0, named=True)
        assert row["p_straggler_meas"] == pytest.approx(p[i])
        assert row["dev_from_others"] == pytest.approx(abs(p[i] - np.mean(np.delete(p, i))))


def test_bad_runs_are_refused():
    a = drifting_trace(1, steps=5)
    with pytest.raises(GroupedDataError, match="need >= 2 runs"):
        run_spread([a], (3.0,))
    with pytest.raises(GroupedDataError, match="field 'step': no step >= 9"):
        run_spread([a, a], (3.0,), from_step=9)
    with pytest.raises(GroupedDataError, match="--tau"):
        run_spread([a, a], (1.0,))
    with pytest.raises(GroupedDataError, match="--prompts 99"):
        run_spread([a, a], (3.0,), prompts=99)


def test_cli_on_the_two_digit_chain_runs(tmp_path):
    runs = [
        DATA / "digit_chain" / "samples.parquet",
        DATA / "digit_chain_seed1" / "samples.parquet",
    ]
    out = tmp_path / "rs"
    args = ["compare", "run-spread", *map(str, runs), "--tau", "2.5", "--from-step", "190"]
    r = CliRunner().invoke(main, [*args, "--draws", "5", "--out", str(out)])
    assert r.exit_code == 0, r.output
    t = pl.read_csv(out / "run_spread.csv")
    assert set(t["run"]) == {0, 1} and set(t["n_steps"]) == {10}
    assert sorted(set(t["G"])) == list(range(1, 17))
    # two runs: each is the other's mean, so their distances are equal
    a, b = (t.filter(pl.col("run") == i)["dev_from_others"].to_numpy() for i in (0, 1))
    assert np.allclose(a, b)
    one = CliRunner().invoke(main, ["compare", "run-spread", str(runs[0]), "--out", str(out / "x")])
    assert one.exit_code == 2 and "need >= 2 runs" in one.output and not (out / "x").exists()


def _flat_run(source: str, outlier: bool, steps: int = 3, B: int = 3, G: int = 2):
    """Every length 5, or (``outlier``) prompt 0's samples 100: P(max/median > 2) is 0,
    or 1 at every G when all B prompts are drawn."""
    rows = [
        {"step": t, "prompt": f"{t}-{i}", "sample_idx": j,
         "length": 100 if outlier and i == 0 else 5}
        for t in range(steps) for i in range(B) for j in range(G)
    ]  # fmt: skip
    return rows_trace(rows, source)


def test_target_is_the_larger_of_0_10_and_floor_plus_2_se():
    """Fit runs never straggle, the held-out run always does: floor 1 in every cell,
    standard error 0, so the target is 1; an error of 0.5 meets it and 1.2 does not."""
    table = pl.DataFrame(
        {"G": [1, 2, 1], "B": [3, 3, 3], "tau": [2.0, 2.0, 2.0], "abs_error": [0.5, 1.2, 0.05],
         "p_straggler_meas_se": [0.0, 0.0, 0.0], "model": ["m", "m", "n"]}
    )  # fmt: skip
    fit = [_flat_run("a", False), _flat_run("b", False)]
    out = with_target(table, fit, _flat_run("h", True), draws=5)
    assert out["floor"].to_list() == [1.0, 1.0, 1.0]
    assert out["target"].to_list() == [1.0, 1.0, 1.0]
    assert out["meets"].to_list() == [True, False, True]
    same = with_target(table, fit, _flat_run("h2", False), draws=5)  # floor 0: target 0.10
    assert same["target"].to_list() == [0.10] * 3 and same["meets"].to_list() == [
        False,
        False,
        True,
    ]
