"""compare collapse: a fit recovers a simulated grid's constants, scaling by hand, bad input, CLI."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from rolloutlab.analysis.collapse.compare import (
    GridError,
    agreement,
    fit_collapse,
    predict,
    read_grid,
    scaling_by_S,
    split_grid,
)
from rolloutlab.sim.models.staleness import StalenessParams, predict_eta_max
from rolloutlab.sim.studies.stability import run_grid

from rolloutlab.cli import main

T = 200
TRUE = replace(StalenessParams(), lag_sensitivity=20.0, R_batch=0.8, R_crit=8.0, sigma_prompt=12.0)
LRS = np.geomspace(2e-3, 0.3, 12)


@pytest.fixture(scope="module")
def grid() -> pl.DataFrame:
    return run_grid(TRUE, [1, 2, 4, 8, 16], LRS, T, 2)


def test_a_fit_on_half_a_simulated_grid_recovers_its_horizon_and_boundary_and_predicts_the_rest(
    grid,
):
    fit_rows, held = split_grid(grid, "lr")
    fit = fit_collapse(fit_rows, T, max_evals=150)
    for name in ("R_crit", "R_batch", "lag_sensitivity"):  # noise comes from the cosine, roughly
        assert getattr(fit.params, name) == pytest.approx(getattr(TRUE, name), rel=0.25), name
    assert fit.noise_from == "cosine"
    S = np.array([1, 4, 16])
    np.testing.assert_allclose(
        predict_eta_max(fit.params, S, T), predict_eta_max(TRUE, S, T), rtol=0.35
    )
    assert agreement(predict(fit.params, held, T))["agreement"] >= 0.9


def test_scaling_by_S_on_a_hand_grid():
    df = pl.DataFrame(
        {
            "S": [2, 2, 2, 2],
            "lr": [0.1, 0.1, 0.2, 0.2],
            "seed": [0, 1, 0, 1],
            "collapsed": [False, True, True, True],
            "t_collapse": [None, 8, 4, 6],
            "M_collapse": [None, 4, 2, 3],
        }
    )
    row = scaling_by_S(df).row(0, named=True)
    assert row["eta_collapse"] == 0.1  # half the seeds collapse at 0.1
    assert row["S_eta_collapse"] == pytest.approx(0.2)
    assert row["M_S_eta"] == pytest.approx(0.8)  # median of 4*2*0.1, 2*2*0.2, 3*2*0.2


def _write(grid: pl.DataFrame, d, steps: int = T):
    d.mkdir(parents=True, exist_ok=True)
    grid.select(
        "S", "lr", "seed", "collapsed", "t_collapse", "M_collapse", "regime", "cos_sim_mean"
    ).write_csv(d / "stability.csv")
    (d / "config.json").write_text(json.dumps({"steps": steps}))
    return d


def test_a_grid_with_a_single_point_is_refused(tmp_path, grid):
    one = grid.filter((pl.col("S") == 4) & (pl.col("lr") == grid["lr"][0]))
    d = _write(one, tmp_path / "one")
    with pytest.raises(GridError, match="at least two points"):
        read_grid(d)
    res = CliRunner().invoke(
        main, ["compare", "collapse", "--real", str(d), "--out", str(tmp_path / "o")]
    )
    assert res.exit_code != 0 and "at least two points" in res.output


def test_a_grid_with_one_lr_cannot_be_split_by_lr(tmp_path, grid):
    with pytest.raises(GridError, match="single lr"):
        split_grid(grid.filter(pl.col("lr") == grid["lr"][0]), "lr")


def test_cli_writes_one_table_one_figure_and_the_agreement(tmp_path, grid):
    real = _write(grid, tmp_path / "real")
    sim = _write(run_grid(StalenessParams(), [1, 4, 16], LRS, T, 1), tmp_path / "sim")
    out = tmp_path / "cmp"
    res = CliRunner().invoke(
        main,
        [
            "compare",
            "collapse",
            "--real",
            str(real),
            "--sim",
            str(sim),
            "--max-evals",
            "30",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    table = pl.read_csv(out / "collapse_scaling.csv")
    assert {"real_S_eta_collapse", "fitted_M_S_eta", "sim_S_eta_collapse"} <= set(table.columns)
    assert (out / "collapse.png").read_bytes()[:4] == b"\x89PNG"
    summary = json.loads((out / "collapse_summary.json").read_text())
    assert 0.0 <= summary["held_out"]["agreement"] <= 1.0 and summary["held_out"]["points"] == 60
