"""``compare horizon``, ``stability``'s and ``advise``'s predicted horizons:
per-mechanism fits on half a grid, seeds as intervals, bad grids refused."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from rolloutlab.analysis.advise.evaluate import HORIZON_COLUMNS, collapse_horizon, with_horizon
from rolloutlab.analysis.collapse.horizon import (
    fit_mechanisms,
    grid_horizon,
    mechanism_of,
    read_grids,
)
from rolloutlab.sim.models.horizon import HorizonLaw, fit_from_dict, fit_horizon, fit_to_dict

from rolloutlab.cli import main
from tests.test_horizon_law import TRUE, synthetic


def write_grid(d, law: HorizonLaw, T: int, clip: bool, is_mode: str, rng_seed: int):
    """A stability grid folder drawn from ``law`` with a real-stability config.json."""
    S, eta, t, _ = synthetic(law, T, seeds=4, rng_seed=rng_seed)
    seeds = np.tile(np.arange(4), len(S) // 4)
    d.mkdir()
    pl.DataFrame(
        {"S": S, "lr": eta, "seed": seeds, "collapsed": np.isfinite(t),
         "t_collapse": [None if np.isnan(v) else int(v) for v in t], "M_collapse": None}
    ).write_csv(d / "stability.csv")  # fmt: skip
    learner = {"clip": clip, "is_mode": is_mode}
    cfg = {"grid": {"base": {"sync": {"steps": T, "learner": learner}}}}
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def compare_horizon(grids, out, *options: str) -> tuple[dict, str]:
    """``rolloutlab compare horizon`` on ``grids`` into ``out`` (must exit 0): its
    ``horizon_summary.json`` and its printed output."""
    real = [x for g in grids for x in ("--real", str(g))]
    res = CliRunner().invoke(main, ["compare", "horizon", *real, *options, "--out", str(out)])
    assert res.exit_code == 0, res.output
    return json.loads((out / "horizon_summary.json").read_text()), res.output


def test_compare_horizon_fits_each_mechanism_and_predicts_held_out_seeds(tmp_path):
    fast = HorizonLaw(R=0.01, a=1.0, C=1e-3, c=1.0, k=4.0, sigma=0.3)  # clip off: earlier
    a = write_grid(tmp_path / "on", TRUE, 60, True, "token", 1)
    b = write_grid(tmp_path / "off", fast, 60, False, "token", 2)
    assert mechanism_of(b) == "clip-off/is-token"
    out = tmp_path / "o"
    summary, _ = compare_horizon([a, b], out, "--bootstrap", "5", "--law", "separate")
    assert set(summary["mechanisms"]) == {"clip-on/is-token", "clip-off/is-token"}
    # drawn from the law with sigma 0.3: held-out classes and steps are predictable
    assert summary["held_out"]["agreement"] >= 0.85
    assert summary["held_out"]["t_collapse_mdape"] <= 0.35
    on, off = (
        summary["mechanisms"][m]["law_all"] for m in ("clip-on/is-token", "clip-off/is-token")
    )
    assert off["R"]["value"] < on["R"]["value"]  # the faster mechanism has the shorter horizon
    pts = pl.read_csv(out / "horizon_points.csv")
    assert (pts["predicted_t_lo"] <= pts["predicted_t_hi"]).all()
    assert (out / "horizon.png").stat().st_size > 10_000


def test_the_pooled_law_shares_the_horizon_and_separates_the_per_step_constant(tmp_path):
    from rolloutlab.analysis.collapse.horizon import fit_mechanisms

    stale = HorizonLaw(R=0.02, a=1.0, C=5e-4, c=1.0, k=4.0, sigma=0.3)  # only C differs
    a = write_grid(tmp_path / "on", TRUE, 60, True, "token", 1)
    b = write_grid(tmp_path / "off", stale, 60, False, "token", 2)
    fits = fit_mechanisms(read_grids([a, b]), n_boot=0, law="pooled")
    on, off = fits["clip-on/is-token"].law, fits["clip-off/is-token"].law
    assert on.R == off.R and on.a == off.a and on.sigma == off.sigma
    assert off.C < on.C  # the mechanism with the earlier stale collapse


def test_grids_of_different_step_counts_are_refused(tmp_path):
    a = write_grid(tmp_path / "a", TRUE, 60, True, "token", 1)
    b = write_grid(tmp_path / "b", TRUE, 100, False, "token", 1)
    with pytest.raises(ValueError, match="different step counts mixed"):
        read_grids([a, b])


def test_one_mechanism_may_come_in_two_grids_but_no_run_twice(tmp_path):
    a = write_grid(tmp_path / "a", TRUE, 60, True, "token", 1)
    b = write_grid(tmp_path / "b", TRUE, 60, True, "token", 2)
    with pytest.raises(ValueError, match="S=1 lr=0.0002 seed=0 is in two grids"):
        read_grids([a, b])
    csv = b / "stability.csv"
    pl.read_csv(csv).filter(pl.col("S") >= 4).write_csv(csv)  # S 4, 8 from the second grid
    csv = a / "stability.csv"
    pl.read_csv(csv).filter(pl.col("S") < 4).write_csv(csv)
    df = read_grids([a, b])
    assert df["mechanism"].unique().to_list() == ["clip-on/is-token"]
    assert sorted(df["S"].unique().to_list()) == [1, 2, 4, 8] and df.height == 96


def test_the_detector_patience_is_read_and_never_mixed(tmp_path):
    a = write_grid(tmp_path / "a", TRUE, 60, True, "token", 1)
    b = write_grid(tmp_path / "b", TRUE, 60, False, "token", 2)
    for d, patience in ((a, 3), (b, 1)):
        cfg = json.loads((d / "config.json").read_text())
        cfg["grid"]["base"]["collapse"] = {"kl_patience": patience}
        (d / "config.json").write_text(json.dumps(cfg))
    assert read_grids([a])["floor"].unique().to_list() == [3]
    with pytest.raises(ValueError, match="different detector patience mixed"):
        read_grids([a, b])
    fits = fit_mechanisms(read_grids([a]), n_boot=0)
    assert next(iter(fits.values())).law.floor == 3.0


def test_grid_horizon_table_and_json_round_trip():
    S, eta, t, T = synthetic(TRUE)
    rows = pl.DataFrame(
        {"S": S, "lr": eta, "seed": 0, "collapsed": np.isfinite(t),
         "t_collapse": [None if np.isnan(v) else int(v) for v in t]}
    )  # fmt: skip
    fit, table, note = grid_horizon(rows, 60, n_boot=5)
    assert fit is not None and "horizon law" in note
    assert (table["t_lo"] <= table["t_hi"]).all() and table["p_collapse"].is_between(0, 1).all()
    back = fit_from_dict(json.loads(json.dumps(fit_to_dict(fit))))
    assert back.law == fit.law and len(back.boot) == len(fit.boot)
    one_S = rows.filter(pl.col("S") == 1)
    assert grid_horizon(one_S, 60)[0] is None


def test_advise_horizon_is_the_law_at_the_span_and_eta():
    S, eta, t, T = synthetic(TRUE)
    fit = fit_horizon(S, eta, t, T, n_boot=5)
    med, lo, hi = collapse_horizon(fit, 1e-6, 1, None)  # bounded:1 -> span 2
    assert lo <= hi and med == pytest.approx(float(fit.law.median(2, 0.01)))  # eta(1e-6) = 0.01
    table = with_horizon(
        pl.DataFrame({"pipeline": ["sync", "bounded:2"], "lr": [1e-6, 1e-6]}), fit, None
    )
    assert all(c in table.columns for c in HORIZON_COLUMNS)
    assert table["horizon_steps"][1] <= table["horizon_steps"][0] + 1  # staler: not later
    with_k = with_horizon(  # K = 2 on sync: span 0 + 2, the span of bounded:1 with K = 1
        pl.DataFrame({"pipeline": ["sync"], "lr": [1e-6], "updates_per_batch": [2]}), fit, None
    )
    assert with_k["horizon_steps"][0] == pytest.approx(med)
    assert collapse_horizon(fit, 1e-6, 1, None, updates=2)[0] == pytest.approx(
        float(fit.law.median(3, 0.01))
    )


def test_mechanism_metrics_read_the_signals_up_to_the_collapse(tmp_path):
    from rolloutlab.analysis.collapse.mechanism_metrics import mechanism_metrics

    run = tmp_path / "g" / "runs" / "S4_lr0.001_seed0"
    run.mkdir(parents=True)
    rows = [
        {"step": t, "actor/ppo_kl": kl, "actor/entropy": 1.0 - 0.1 * t, "actor/grad_norm": 1.0}
        for t, kl in enumerate([0.1, 0.2, 0.3, 9.0])
    ]
    (run / "learner.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = pl.DataFrame(
        {"mechanism": ["m", "m"], "S": [4, 4], "lr": [1e-3, 1e-3], "seed": [0, 1],
         "collapsed": [True, False], "t_collapse": [3, None]}
    )  # fmt: skip
    out = mechanism_metrics(runs, {"m": [tmp_path / "other", tmp_path / "g"]})
    assert out.height == 1  # seed 1 has no run folder
    row = out.row(0, named=True)
    assert row["ppo_kl_max"] == pytest.approx(0.3)  # steps 0..2: before the collapse step 3
    assert row["entropy_first"] == pytest.approx(0.9) and row["clipfrac_mean"] is None


def test_a_synchronous_run_shared_by_mechanisms_counts_once():
    from rolloutlab.analysis.collapse.horizon import distinct_runs

    rows = pl.DataFrame(
        {"mechanism": ["on", "off", "on", "off", "off"], "S": [1, 1, 4, 4, 1],
         "lr": [1e-3] * 5, "seed": [1, 1, 1, 1, 3], "collapsed": [True, True, True, True, False],
         "t_collapse": [20, 20, 33, 33, None]}
    )  # fmt: skip
    out = distinct_runs(rows)
    # the S = 1 seed-1 run once; both stale runs (different mechanisms) and seed 3 kept
    assert out.height == 4 and out.filter(pl.col("S") == 4).height == 2


def test_the_class_ceiling_is_the_majority_of_each_held_out_cell():
    from rolloutlab.analysis.collapse.horizon import class_ceiling

    held = pl.DataFrame(
        {"mechanism": ["m"] * 5, "S": [4, 4, 4, 1, 1], "lr": [1e-3] * 5,
         "collapsed": [True, False, True, False, True]}
    )  # fmt: skip
    # cell S=4: 2 of 3 at best, cell S=1: 1 of 2 -> 3 of 5
    assert class_ceiling(held) == pytest.approx(0.6)
