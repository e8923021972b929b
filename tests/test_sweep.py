"""Sweeps: the grid, equality with single comparisons on both engines, the per-point
means, and the `rolloutlab sweep` command."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.models.cost import LinearCost
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.studies.compare import plan_comparison, run_comparison
from rolloutlab.sim.studies.sweep import AXES, grid, run_sweep, sweep_means

from tests.cli_helpers import assert_refused, invoke_on

SPECS = ["static:2", "static:4", "sagc"]


def test_grid_is_the_cartesian_product_and_refuses_bad_axes():
    pts = grid([4, 8], [1, 2, 3], [16], [0, 5])
    assert len(pts) == 12 and len({tuple(p.values()) for p in pts}) == 12
    assert pts[0] == {"prompts": 4, "workers": 1, "max_num_seqs": 16, "seed": 0}
    assert pts[1]["seed"] == 5  # the last axis varies fastest
    with pytest.raises(ValueError, match="--prompts: no values"):
        grid([], [1], [1], [0])
    with pytest.raises(ValueError, match="--workers: duplicated"):
        grid([4], [1, 1], [1], [0])
    with pytest.raises(ValueError, match="--max-num-seqs: values must be >= 1"):
        grid([4], [1], [0], [0])


def _linear(sc):
    return dataclasses.replace(
        sc,
        cost=LinearCost(
            a_s=0.01, b_s=1e-4, c_s=1e-7, learner_const_s=0.5, sync_s=0.1, gen_overhead_s=0.2
        ),
    )


def test_each_sweep_row_is_the_single_comparison_of_its_point(tiny_scenario):
    sc = _linear(tiny_scenario)
    pts = grid([3, 5], [1, 2], [4, 16], [7])
    runs = run_sweep(sc, SPECS, pts, steps=6)
    assert runs.height == len(pts) * len(SPECS) and runs.columns[:4] == list(AXES)
    p = pts[5]
    one = dataclasses.replace(
        sc,
        engine=dataclasses.replace(
            sc.engine, n_workers=p["workers"], max_num_seqs=p["max_num_seqs"]
        ),
    )
    cfg = RunConfig(steps=6, prompts=p["prompts"], seed=p["seed"])
    summary = run_comparison(plan_comparison(one, SPECS, cfg, engine="fast")).summary
    row = runs.filter(*(pl.col(a) == v for a, v in p.items())).drop(AXES)
    assert row.to_dicts() == summary.to_dicts()


def test_fast_and_simpy_sweeps_agree(tiny_scenario):
    sc = _linear(tiny_scenario)
    pts = grid([4], [1, 3], [2, 16], [0, 1])
    fast, simpy = (
        run_sweep(sc, SPECS, pts, 5, engine="fast"),
        run_sweep(sc, SPECS, pts, 5, engine="simpy"),
    )
    for col in fast.columns:
        if fast[col].dtype == pl.Float64:
            np.testing.assert_allclose(
                fast[col].to_numpy(), simpy[col].to_numpy(), rtol=1e-9, atol=1e-12
            )
        else:
            assert fast[col].to_list() == simpy[col].to_list(), col


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([4, 8]),
            st.sampled_from(["a", "b", "c"]),
            st.integers(0, 3),
            st.floats(1, 1e4),
            st.floats(1, 1e4),
        ),
        min_size=1,
        max_size=30,
        unique_by=lambda r: (r[0], r[1], r[2]),
    )
)
def test_means_average_over_seeds_and_mark_one_winner_per_point(rows):
    runs = pl.DataFrame(
        {
            "prompts": [r[0] for r in rows],
            "workers": 1,
            "max_num_seqs": 8,
            "controller": [r[1] for r in rows],
            "seed": [r[2] for r in rows],
            "wall_clock_s": [r[3] for r in rows],
            "tokens_per_s": [r[4] for r in rows],
            **{c: 0.0 for c in ("gen_time_s", "slot_idle_frac", "straggler_rate", "mean_G")},
        }
    )
    means = sweep_means(runs)
    for (B,), point in means.group_by(["prompts"]):
        assert point["fastest"].sum() == 1 and point["most_tokens_per_s"].sum() == 1
        assert point.filter("fastest")["wall_clock_s"][0] == point["wall_clock_s"].min()
        assert point.filter("most_tokens_per_s")["tokens_per_s"][0] == point["tokens_per_s"].max()
        for ctl in point["controller"]:
            want = [r[3] for r in rows if r[0] == B and r[1] == ctl]
            got = point.filter(pl.col("controller") == ctl)
            assert got["seeds"][0] == len(want)
            assert got["wall_clock_s"][0] == pytest.approx(np.mean(want))


def test_sweep_command_writes_tables_figure_and_config(tmp_path, calibration_file):
    out = tmp_path / "sw"
    grid_args = "--steps 3 --prompts 2,4 --workers 1,2 --seeds 2 --controller static:2,sagc"
    res = invoke_on("sweep", calibration_file, out, *grid_args.split())
    assert res.exit_code == 0, res.output
    runs, means = pl.read_csv(out / "runs.csv"), pl.read_csv(out / "means.csv")
    assert runs.height == 2 * 2 * 2 * 2 and means.height == 2 * 2 * 2
    assert (out / "sweep.png").stat().st_size > 10_000
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["command"] == "sweep" and len(cfg["points"]) == 8 and cfg["engine_impl"] == "fast"


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--prompts", "4,x"], "'--prompts': item 'x'"),
        (["--workers", "2,2"], "'--workers': repeated item(s) 2"),
        (["--model", "qwen2.5-3b", "--gpu", "h100"], "--no-kv-cache"),
        (["--controller", "static:0"], "static:G"),
    ],
)
def test_sweep_command_bad_input(tmp_path, calibration_file, extra, message):
    res = invoke_on("sweep", calibration_file, tmp_path / "o", "--steps", "2", *extra)
    assert_refused(res, message, tmp_path / "o")
