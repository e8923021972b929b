"""``rolloutlab advise``: the search finds the known optimum of a synthetic objective under
its constraints, its Pareto rows are feasible and non-dominated, and the command writes
its tables and figure (bad input: one line, exit 2, nothing written)."""

from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from rolloutlab.analysis.advise.evaluate import collapse_margin
from rolloutlab.analysis.advise.search import Constraints, SearchSpace, explain_infeasible, search
from rolloutlab.sim.models.learning import LearningModel, LearningParams
from rolloutlab.sim.models.staleness import StalenessParams, predict_eta_max

from rolloutlab.cli import main
from tests.cli_helpers import assert_refused

SPACE = SearchSpace(
    controller=("a", "b"),
    prompts=(1, 2, 3),
    workers=(1, 2, 4),
    max_num_seqs=(8,),
    pipeline=("sync",),
    lr=(1.0, 2.0, 3.0),
)


def synthetic(s: dict) -> dict:
    """Time falls with lr and workers; stragglers grow with workers x prompts; the margin
    falls with lr. Unconstrained optimum (a, 1, 4, lr 3) breaks both constraints below."""
    time = 100 / (s["lr"] * s["workers"]) + s["prompts"] + (5 if s["controller"] == "b" else 0)
    return {
        "time_to_target_s": time,
        "time_per_step_s": time / 10,
        "wall_clock_s": 2 * time,
        "straggler_rate": 0.1 * s["workers"] * s["prompts"],
        "collapse_margin": 3.5 / s["lr"],
    }


def test_search_returns_the_known_constrained_optimum():
    # straggler <= 0.35: workers x prompts <= 3; margin >= 1.5: lr <= 2; budget 2: workers <= 2
    c = Constraints(max_straggler_rate=0.35, min_collapse_margin=1.5, accelerators=2)
    table = search(SPACE, c, lambda ss: [synthetic(s) for s in ss], n_trials=60, batch=4, seed=1)
    assert table.height == 60 and table["workers"].max() <= 2
    best = table.filter("best").row(0, named=True)
    assert {k: best[k] for k in ("controller", "prompts", "workers", "lr")} == {
        "controller": "a",
        "prompts": 1,
        "workers": 2,
        "lr": 2.0,
    }
    assert best["time_s"] == pytest.approx(26.0)


def test_pareto_rows_are_feasible_and_not_dominated():
    c = Constraints(max_straggler_rate=0.5, min_collapse_margin=1.2)
    table = search(SPACE, c, lambda ss: [synthetic(s) for s in ss], n_trials=30, batch=3, seed=0)
    feas = table.filter("feasible")
    objs = [
        (r["time_s"], r["straggler_rate"], -r["collapse_margin"])
        for r in feas.iter_rows(named=True)
    ]

    def dominated(o):
        return any(all(x <= y for x, y in zip(p, o)) and p != o for p in objs)

    want = {r["trial"] for r, o in zip(feas.iter_rows(named=True), objs) if not dominated(o)}
    assert set(table.filter("pareto")["trial"]) == want and want
    for r in table.iter_rows(named=True):  # feasibility follows the constraints exactly
        ok = r["straggler_rate"] <= 0.5 and r["collapse_margin"] >= 1.2
        assert r["feasible"] == ok


def test_a_failed_setting_is_a_failed_trial_not_a_crash():
    def run(ss):
        return [{"error": "ValueError: no"} if s["lr"] == 3.0 else synthetic(s) for s in ss]

    table = search(SPACE, Constraints(), run, n_trials=20, batch=4, seed=0)
    failed = table.filter(pl.col("status") == "failed")
    assert set(failed["lr"]) <= {3.0} and not failed["feasible"].any()
    assert not table.filter(pl.col("lr") == 3.0)["best"].any()


@pytest.mark.parametrize("S, lr", list(itertools.product([0, 1, 4], [5e-7, 2e-6])))
def test_collapse_margin_is_the_closed_form_boundary_over_eta(S, lr):
    p = LearningParams(kappa=1.0)
    eta = p.eta_ref * lr / p.lr_ref
    want = float(predict_eta_max(StalenessParams(), S + 1, 60)) / eta  # update span S + 1
    assert collapse_margin(lr, S, 60, p) == pytest.approx(want, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(s_max=st.integers(0, 12), log_lr=st.floats(-8.0, -4.0))
def test_collapse_margin_below_one_exactly_when_the_learning_model_collapses(s_max, log_lr):
    # One step (T = 1: the horizon bound is far) training on groups s_max versions old: the
    # margin advise reports and the simulator's collapse come from the same rule.
    lr, p = 10.0**log_lr, LearningParams(kappa=1.0)
    margin = collapse_margin(lr, s_max, 1, p)
    assume(abs(margin - 1.0) > 1e-9)  # (exactly on the boundary: either side is right)
    model = LearningModel(p)
    model.apply_signal(np.ones(4), lr, np.full(4, s_max), step=0, batch_size=4)
    assert model.collapsed == (margin < 1.0), (margin, model.t_collapse)


@settings(max_examples=300, deadline=None)
@given(
    s_max=st.integers(0, 12),
    T=st.integers(1, 2000),
    K=st.integers(1, 32),
    log_lr=st.floats(-8.0, -4.0),
)
def test_collapse_margin_never_rises_with_more_updates_per_batch(s_max, T, K, log_lr):
    # One more update per batch: the last mini-batch trains one more update off-policy (span
    # S_max + K + 1) and the run applies T more updates: the margin can only fall.
    lr, p = 10.0**log_lr, LearningParams(kappa=1.0)
    assert collapse_margin(lr, s_max, T, p, K + 1) <= collapse_margin(lr, s_max, T, p, K)


def test_search_space_refuses_a_k_that_does_not_divide_every_prompt_batch():
    space = {**SPACE.__dict__, "prompts": (4, 8)}
    assert (
        SearchSpace(**{**space, "updates_per_batch": (1, 2, 4)}).size()
        == 3 * SearchSpace(**space).size()
    )
    for ks, words in [((8,), "--updates-per-batch 8: must divide the prompt batch B = 4"),
                      ((3,), "--updates-per-batch 3: must divide"),
                      ((0,), "--updates-per-batch: expected an int >= 1"),
                      ((2, 2), "duplicated updates_per_batch")]:  # fmt: skip
        with pytest.raises(ValueError, match=words):
            SearchSpace(**{**space, "updates_per_batch": ks})


TINY = (
    "advise --controller static:2,static:4 --prompts 4 --workers 1,2 --max-num-seqs 64 "
    "--pipeline sync,bounded:2 --lr 1e-6,4e-6 --steps 15 --trials 6 --parallel-trials 3"
).split()


def test_advise_command_writes_tables_and_figure(tmp_path):
    out = tmp_path / "adv"
    res = CliRunner().invoke(main, [*TINY, "--out", str(out)])
    assert res.exit_code == 0, res.output
    trials = pl.read_csv(out / "trials.csv")
    searched = trials.filter(pl.col("origin") == "search")
    assert searched.height == 6 and trials["best"].sum() == 1
    # the polish prices settings no trial had, at most 2 per varied knob (4) per round (3)
    polished = trials.filter(pl.col("origin") == "polish")
    assert 0 < polished.height <= 24 and polished["trial"].min() == 6
    knobs = ["controller", "workers", "pipeline", "lr"]  # (the search may repeat a setting)
    assert polished.unique(knobs).height == polished.height
    assert polished.join(searched, on=knobs).height == 0
    best = trials.filter("best").row(0, named=True)
    assert best["time_s"] == trials.filter("feasible")["time_s"].min()
    polish = json.loads((out / "config.json").read_text())["polish"]
    assert polish["trials"] == polished.height and polish["line"] in res.output
    pareto = pl.read_csv(out / "pareto.csv")
    assert pareto["feasible"].all() and set(pareto["trial"]) <= set(trials["trial"])
    assert (out / "advise.png").stat().st_size > 10_000
    assert "best:" in res.output
    assert trials["updates_per_batch"].unique().to_list() == [1]  # the default: K = 1 only


def test_advise_searches_updates_per_batch(tmp_path):
    # The space is K x lr = 4 settings; 12 trials price each. K = 2 keeps the wall clock
    # (the same tokens through the learner) and lowers the margin (span S_max + 2, 2 T updates).
    out = tmp_path / "adv"
    args = ["advise", "--controller", "static:4", "--prompts", "4", "--workers", "1",
            "--max-num-seqs", "64", "--pipeline", "bounded:2", "--lr", "1e-6,4e-6",
            "--updates-per-batch", "1,2", "--steps", "10", "--trials", "12", "--parallel-trials", "4",
            "--seed", "1", "--out", str(out)]  # fmt: skip
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    trials = pl.read_csv(out / "trials.csv")
    got = trials.unique(["updates_per_batch", "lr"]).sort("updates_per_batch", "lr")
    assert got.height == 4, got  # 12 trials over 4 settings: each one tried
    for r in got.iter_rows(named=True):  # bounded:2: S_max = 2, span 2 + K, K T updates
        want = collapse_margin(r["lr"], 2, 10, None, r["updates_per_batch"])
        assert r["collapse_margin"] == pytest.approx(want)
    k1, k2 = (got.filter(pl.col("updates_per_batch") == k) for k in (1, 2))
    assert (k2["collapse_margin"] < k1["collapse_margin"]).all()
    assert k2["wall_clock_s"].to_list() == k1["wall_clock_s"].to_list()
    assert "updates_per_batch" in res.output
    assert json.loads((out / "config.json").read_text())["space"]["updates_per_batch"] == [1, 2]


def test_advise_polish_trials_zero_prices_nothing_after_the_search(tmp_path):
    out = tmp_path / "adv"
    res = CliRunner().invoke(main, [*TINY, "--polish-trials", "0", "--out", str(out)])
    assert res.exit_code == 0, res.output
    trials = pl.read_csv(out / "trials.csv")
    assert trials.height == 6 and trials["origin"].unique().to_list() == ["search"]
    assert "polish: 0 single-knob neighbours priced in 0 round(s) (budget 0)" in res.output


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--polish-trials", "-1"], "'--polish-trials'"),
        (["--rollout-gpus", "1", "--workers", "2,4"], "--rollout-gpus 1: no --workers choice fits"),
        (["--pipeline", "sync,bounded:x"], "pipeline spec 'bounded:x'"),
        (["--lr", "0.1,2"], "--lr"),
        (["--updates-per-batch", "0"], "'--updates-per-batch': item '0'"),
        (["--updates-per-batch", "1,-2"], "'--updates-per-batch': item '-2'"),
        (["--updates-per-batch", "1.5"], "'--updates-per-batch': item '1.5'"),
        (["--updates-per-batch", "8"], "--updates-per-batch 8: must divide the prompt batch B = 4"),
        (["--updates-per-batch", "1,3"], "--updates-per-batch 3: must divide"),
    ],
)
def test_advise_bad_input(tmp_path, extra, message):
    res = CliRunner().invoke(main, [*TINY, *extra, "--out", str(tmp_path / "o")])
    assert_refused(res, message, tmp_path / "o")


def test_evaluate_runs_the_setting_on_the_dataset_size_it_is_given():
    # --dataset-size 8 with B = 8: the same 8 prompts every step, as `sim --dataset-size 8`.
    from rolloutlab.analysis.advise.evaluate import engine_for, evaluate
    from rolloutlab.sim.models.rewards import reward_config
    from rolloutlab.sim.pipelines.spec import parse_pipeline
    from rolloutlab.sim.pipelines.sync import RunConfig
    from rolloutlab.sim.scenario.scenario import load_scenario
    from rolloutlab.sim.studies.compare import plan_comparison, run_comparison

    sc = load_scenario("longcot")
    rewards = reward_config(None, sc.pass_rate, sc.learning)
    setting = {"controller": "static:4", "prompts": 8, "workers": 1, "max_num_seqs": 256,
               "pipeline": "sync", "lr": 2e-6, "updates_per_batch": 2}  # fmt: skip
    got = evaluate(setting, sc, rewards, 10, 0.9, dataset_size=8)
    cfg = RunConfig(
        steps=10, prompts=8, lr=2e-6, rewards=rewards, dataset_size=8, updates_per_batch=2
    )
    engine = dataclasses.replace(sc.engine, n_workers=1, max_num_seqs=256)
    pipes = [parse_pipeline("sync")]
    placed = dataclasses.replace(sc, engine=engine)
    plan = plan_comparison(  # on the engine evaluate picks (fast path: sync, slots)
        placed, ["static:4"], cfg, pipelines=pipes, engine=engine_for(placed, pipes[0]), target=0.9
    )
    summary = run_comparison(plan).summary
    row = summary.row(0, named=True)
    assert got["wall_clock_s"] == row["wall_clock_s"]
    assert got["wall_clock_s"] != evaluate(setting, sc, rewards, 10, 0.9)["wall_clock_s"]


def test_gpu_hours_objective_prefers_fewer_gpus_where_time_prefers_more():
    # lr 3: time 100/(3 w) + p; 4 workers are fastest, 1 worker uses the fewest GPU-hours
    space = dataclasses.replace(SPACE, controller=("a",), prompts=(1,), lr=(3.0,))
    c = Constraints(max_straggler_rate=1.0, min_collapse_margin=1.0)
    price = lambda ss: [synthetic(s) for s in ss]
    by_time = search(space, c, price, 12, seed=0, gpus=lambda s: s["workers"])
    by_gpu = search(space, c, price, 12, seed=0, objective="gpu-hours", gpus=lambda s: s["workers"])
    assert by_time.filter("best")["workers"].item() == 4
    best = by_gpu.filter("best").row(0, named=True)
    assert best["workers"] == 1
    # time to target 100/3 + 1 s on 1 GPU
    assert best["gpu_hours"] == pytest.approx((100 / 3 + 1) / 3600)
    with pytest.raises(ValueError, match="objective"):
        search(space, c, price, 2, objective="gpu-hours")


def test_no_feasible_trial_names_the_constraint_and_the_closest():
    c = Constraints(max_straggler_rate=0.05, min_collapse_margin=1.0)
    table = search(SPACE, c, lambda ss: [synthetic(s) for s in ss], n_trials=20, seed=0)
    assert not table["feasible"].any()
    line, closest = explain_infeasible(table, c, use_target=True)
    n_ok = table.filter(pl.col("status") == "ok").height
    assert f"straggler_rate > 0.05 in {n_ok}" in line
    # the smallest straggler rate is 0.1 (1 worker x 1 prompt): violation (0.1 - 0.05) / 0.05
    assert closest["violation"][0] == pytest.approx(1.0)
    assert closest.row(0, named=True)["workers"] * closest.row(0, named=True)["prompts"] == 1


def test_run_scale_reads_the_calibration_and_says_where_from():
    from rolloutlab.calibration.scenarios.run_scale import neighbourhood, run_scale
    from rolloutlab.sim.scenario.scenario import load_scenario

    scale = run_scale(load_scenario("gsm8k"))  # verl-tb calibration of 1024 prompts x G = 5
    assert (scale.prompts, scale.group_size) == (1024, 5)
    assert scale.sources["prompts"] == "logged" and scale.sources["group_size"] == "assumed"
    around = neighbourhood(scale)
    assert around["prompts"] == "512,1024,2048"
    assert around["controllers"].split(",")[:3] == ["static:2", "static:5", "static:10"]


def test_group_reading_counts_steps_whose_share_of_straggling_groups_passes_the_level():
    from rolloutlab.analysis.advise.evaluate import group_straggler_rate
    from rolloutlab.sim.control.controllers import StaticG
    from rolloutlab.sim.pipelines.registry import simulate
    from rolloutlab.sim.pipelines.sync import RunConfig
    from rolloutlab.sim.scenario.scenario import load_scenario
    from rolloutlab.sim.trace.metrics import group_straggler_share

    sc = load_scenario("longcot")
    res = simulate(sc, StaticG(8), RunConfig(steps=4, prompts=16), engine="fast")
    tau = float(sc.defaults["tau"])
    shares = [
        group_straggler_share(
            [g["response_tokens"].to_list() for _, g in s.group_by("prompt_id")], tau
        )
        for _, s in res.rollouts.group_by("step")
    ]
    for level in (0.0, 0.05, 0.2):
        want = np.mean([x > level for x in shares])
        assert group_straggler_rate(res.rollouts, sc, level) == pytest.approx(want)


def test_advise_takes_the_group_reading(tmp_path):
    out = tmp_path / "adv"
    res = CliRunner().invoke(main, [*TINY, "--straggler-level", "0.2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "group reading" in res.output
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["straggler_reading"] == {"reading": "group", "level": 0.2}
