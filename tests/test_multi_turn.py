"""Multi-turn rollouts (docs/multi_turn.md): the engine driver against the single-turn
engine, its invariants (sandbox limit, tool before next turn, prefix cache), the laws and
their fit, the turn metrics against brute force."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.control.spec import parse_controller
from rolloutlab.sim.engine.config import EngineConfig
from rolloutlab.sim.engine.core import Engine
from rolloutlab.sim.engine.turns import submit_turns
from rolloutlab.sim.models.turns import (
    MultiTurn,
    ToolLatency,
    TurnLaw,
    fit_tool_latency,
    multi_turn_from,
)
from rolloutlab.sim.pipelines.registry import simulate
from rolloutlab.sim.pipelines.spec import parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.trace.turn_metrics import merge_intervals, turn_summary, uncovered_s
from rolloutlab.sim.trace.turns import turn_frame, validate_turns

from tests.engine_helpers import dyadic_costs


def _run(cost, config, mt, prompts, lengths, n_turns, latencies, cap=10_000):
    """Run one step's multi-turn rollouts to the end; returns the TurnBatch."""
    env = simpy.Environment()
    engine = Engine(env, cost, config)
    sandboxes = simpy.Resource(env, mt.sandboxes) if mt.sandboxes else None
    n = len(n_turns)
    keys = np.repeat(np.arange(n // 2 + n % 2), 2)[:n]
    out = submit_turns(engine, mt, sandboxes, keys, prompts, lengths, n_turns, latencies, cap)
    env.run(until=out.done)
    return out


def _case(draw, max_turns):
    n = draw(st.integers(1, 12))
    K = draw(st.integers(1, max_turns))
    lengths = np.array(draw(st.lists(st.integers(1, 40), min_size=K * n, max_size=K * n)))
    n_turns = np.array(draw(st.lists(st.integers(1, K), min_size=n, max_size=n)))
    lat = np.array(draw(st.lists(st.integers(0, 40), min_size=n * K, max_size=n * K))) / 8
    prompts = np.array(draw(st.lists(st.integers(0, 30), min_size=n, max_size=n)))
    return lengths.reshape(K, n), n_turns, lat.reshape(n, K), prompts


@st.composite
def one_turn_cases(draw):
    lengths, _, _, prompts = _case(draw, 1)
    cfg = EngineConfig(n_workers=draw(st.integers(1, 3)), max_num_seqs=draw(st.integers(1, 6)))
    return draw(dyadic_costs()), cfg, lengths, prompts


@settings(max_examples=60, deadline=None)
@given(one_turn_cases())
def test_one_turn_zero_latency_equals_single_turn_engine(case):
    cost, cfg, lengths, prompts = case
    n = lengths.shape[1]
    mt = MultiTurn(TurnLaw("fixed", 1.0, 1), ToolLatency())
    out = _run(cost, cfg, mt, prompts, lengths, np.ones(n, dtype=np.int64), np.zeros((n, 1)))
    keys = np.repeat(np.arange(n // 2 + n % 2), 2)[:n]
    env = simpy.Environment()
    ref = Engine(env, cost, cfg).submit(keys, prompts, lengths[0], exclusive=True)
    env.run(until=ref.done)
    np.testing.assert_array_equal(out.t_finish, ref.t_finish)
    np.testing.assert_array_equal(out.t_first_token, ref.t_first_token)
    np.testing.assert_array_equal(out.worker, ref.worker)
    assert (out.finish_reason == "stop").all() and len(out.turn_rows) == n


@st.composite
def multi_cases(draw):
    lengths, n_turns, lat, prompts = _case(draw, 4)
    sandboxes = draw(st.one_of(st.none(), st.integers(1, 3)))
    timeout = draw(st.one_of(st.none(), st.integers(1, 6).map(lambda k: k / 1.0)))
    mt = MultiTurn(
        TurnLaw("fixed", 1.0, 1), ToolLatency(), sandboxes, timeout, draw(st.integers(0, 9))
    )
    cfg = EngineConfig(n_workers=draw(st.integers(1, 3)), max_num_seqs=draw(st.integers(1, 4)))
    return draw(dyadic_costs(min_a=1)), cfg, mt, lengths, n_turns, lat, prompts


@settings(max_examples=80, deadline=None)
@given(multi_cases())
def test_sandboxes_tools_before_turns_and_prefix_cache(case):
    cost, cfg, mt, lengths, n_turns, lat, prompts = case
    out = _run(cost, cfg, mt, prompts, lengths, n_turns, lat)
    df = pl.DataFrame(out.turn_rows).sort("rollout", "turn")
    calls = df.filter(pl.col("t_tool_start").is_not_null())
    if mt.sandboxes is not None and calls.height:  # running calls at each call's start
        s, e = calls["t_tool_start"].to_numpy(), calls["t_tool_end"].to_numpy()
        running = ((s[None, :] <= s[:, None]) & (e[None, :] > s[:, None])).sum(axis=1)
        assert running.max() <= mt.sandboxes
    for (i,), g in df.group_by(["rollout"]):
        g = g.sort("turn")
        assert g["turn"].to_list() == list(range(g.height))
        assert g["worker"].n_unique() == 1  # sticky session
        for a, b in zip(
            g.head(g.height - 1).iter_rows(named=True), g.tail(g.height - 1).iter_rows(named=True)
        ):
            assert b["t_submit"] == a["t_tool_end"] and b["t_first_token"] > a["t_tool_end"]
            assert (
                b["context_tokens"]
                == a["context_tokens"] + a["response_tokens"] + mt.tool_output_tokens
            )
            assert b["prefill_tokens"] == mt.tool_output_tokens
        last = g.row(g.height - 1, named=True)
        h, T = g.height, np.inf if mt.timeout_s is None else mt.timeout_s
        timed_out = last["finish_reason"] == "tool_timeout"
        assert out.finish_reason[i] == last["finish_reason"]
        assert (lat[i, : h - 1] <= T).all() and timed_out == (
            lat[i, h - 1] > T and h < n_turns[i] + 1 and last["t_tool_end"] is not None
        )
        if not timed_out:
            assert g.height == n_turns[i] and out.t_finish[i] == last["t_finish"]
        assert out.response_tokens[i] == g["response_tokens"].sum()


def test_pipeline_one_turn_equals_single_turn(tiny_scenario):
    mt = MultiTurn(TurnLaw("fixed", 1.0, 1), ToolLatency())
    cfg = RunConfig(steps=3, prompts=4)
    single = simulate(tiny_scenario, parse_controller("static:4"), cfg)
    multi = simulate(
        dataclasses.replace(tiny_scenario, multi_turn=mt), parse_controller("static:4"), cfg
    )
    assert single.turns is None and multi.turns is not None
    assert multi.rollouts.equals(single.rollouts) and multi.steps.equals(single.steps)


def _simulate_tools(scenario, mean, latency, slots, timeout, out_tokens, G, steps, prompts):
    """A sync run of ``scenario`` with geometric turns (``mean``, at most 6) and the tool
    ``latency = (min_s, scale_s, sigma)``."""
    block = {
        "turns": {"law": "geometric", "mean": mean, "max": 6},
        "tool_latency": dict(zip(("min_s", "scale_s", "sigma"), latency)),
        "sandboxes": slots,
        "timeout_s": timeout,
        "tool_output_tokens": out_tokens,
    }
    sc = dataclasses.replace(scenario, multi_turn=multi_turn_from(block))
    return simulate(sc, parse_controller(f"static:{G}"), RunConfig(steps=steps, prompts=prompts))


def test_pipeline_multi_turn_tables(tiny_scenario):
    res = _simulate_tools(tiny_scenario, 3, (0.1, 0.5, 1.0), 2, 2.0, 8, G=4, steps=2, prompts=4)
    turns = validate_turns(res.turns)
    per = turns.group_by("step", "prompt_id", "sample_idx").agg(pl.col("response_tokens").sum())
    joined = res.rollouts.join(per, on=["step", "prompt_id", "sample_idx"])
    assert joined.height == res.rollouts.height == 2 * 4 * 4
    assert (joined["response_tokens"] == joined["response_tokens_right"]).all()
    s = turn_summary(res.rollouts, turns)
    assert 1.0 <= s["turns_mean"] <= 6 and 0 <= s["tool_frac"] <= 1 and s["rank_spread_s"] >= 0
    assert s["tool_timeouts"] == (res.rollouts["finish_reason"] == "tool_timeout").sum()


@pytest.mark.parametrize("spec", ["one-step-off", "bounded:2", "partial:1:sync=drain"])
def test_async_pipelines_run_multi_turn_rollouts(tiny_scenario, spec):
    mt = multi_turn_from({"turns": {"law": "fixed", "n": 3}, "tool_latency": {"min_s": 0.2}})
    sc = dataclasses.replace(tiny_scenario, multi_turn=mt)
    res = simulate(
        sc, parse_controller("static:2"), RunConfig(steps=3, prompts=4), parse_pipeline(spec)
    )
    consumed = res.rollouts.filter(pl.col("finish_reason") != "abort")
    assert consumed.height == 3 * 4 * 2
    turns = validate_turns(res.turns)
    per = turns.group_by("step", "prompt_id", "sample_idx").agg(
        pl.len(), pl.col("response_tokens").sum()
    )
    joined = consumed.join(per, on=["step", "prompt_id", "sample_idx"])
    assert joined.height == consumed.height and (joined["len"] == 3).all()
    assert (joined["response_tokens"] == joined["response_tokens_right"]).all()


@pytest.mark.parametrize(
    "spec", ["async:1", "oversample:1.5", "groupover:4/2", "one-step-off:sync=abort"]
)
def test_pipelines_that_abort_refuse_multi_turn(tiny_scenario, spec):
    sc = dataclasses.replace(tiny_scenario, multi_turn=multi_turn_from({}))
    with pytest.raises(ValueError, match="multi_turn: runs under"):
        simulate(
            sc, parse_controller("static:4"), RunConfig(steps=1, prompts=4), parse_pipeline(spec)
        )


@pytest.mark.parametrize(
    "block, field",
    [
        ({"turns": {"law": "fixed", "n": 0}}, "turns.n"),
        ({"turns": {"law": "geometric", "mean": -2, "max": 4}}, "turns.mean"),
        ({"turns": {"law": "geometric", "mean": 2, "max": 0}}, "turns.max"),
        ({"tool_latency": {"scale_s": float("nan")}}, "tool_latency.scale_s"),
        ({"sandboxes": 0}, "sandboxes"),
        ({"tool_latency": {"min_s": 5.0}, "timeout_s": 2.0}, "timeout_s"),
    ],
)
def test_bad_blocks_name_the_field(block, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        multi_turn_from(block)


def test_turn_law_is_keyed_and_geometric():
    law = TurnLaw("geometric", 3.0, 50)
    ids = np.arange(4000)
    n = law.draw(7, 2, ids, 4)
    assert n.min() >= 1 and n.max() <= 50
    assert abs(n.mean() - 3.0) < 0.1  # geometric mean 3 (truncation at 50: negligible)
    np.testing.assert_array_equal(law.draw(7, 2, ids, 2), n[:, :2])  # sample j whatever G


@pytest.mark.parametrize("censor", [None, 8.0])
def test_fit_tool_latency_recovers_the_law(censor):
    true = ToolLatency(min_s=0.3, scale_s=2.0, sigma=0.8)
    x = true.draw(np.random.default_rng(0).uniform(size=2000))
    if censor is not None:
        x = np.minimum(x, censor)  # calls killed at the timeout
    fit = fit_tool_latency(x, censor_s=censor)
    assert abs(fit.min_s - 0.3) < 0.05
    assert abs(fit.scale_s - 2.0) < 0.15 and abs(fit.sigma - 0.8) < 0.06


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 10)), max_size=8),
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 10)), max_size=8),
)
def test_uncovered_matches_a_grid(a, b):
    grid = np.arange(0, 50, 0.5) + 0.25  # midpoints of half-unit cells
    A = merge_intervals(np.array([s for s, _ in a]), np.array([s + d for s, d in a]))
    B = merge_intervals(np.array([s for s, _ in b]), np.array([s + d for s, d in b]))
    ina = np.zeros_like(grid, dtype=bool)
    inb = np.zeros_like(grid, dtype=bool)
    for s, e in A:
        ina |= (grid > s) & (grid < e)
    for s, e in B:
        inb |= (grid > s) & (grid < e)
    assert uncovered_s(A, B) == pytest.approx(0.5 * (ina & ~inb).sum())


def test_turn_frame_keys():
    rows = [dict(rollout=3, turn=0, worker=1, context_tokens=5, prefill_tokens=5, response_tokens=2,
                 t_submit=0.0, t_first_token=0.1, t_finish=0.2, t_tool_request=None,
                 t_tool_start=None, t_tool_end=None, finish_reason="stop")]  # fmt: skip
    df = turn_frame("r", 4, np.array([10, 10, 11, 11]), 2, rows)
    assert df.row(0, named=True)["prompt_id"] == 11 and df["sample_idx"][0] == 1


def test_calibrate_turns_recovers_the_block(tmp_path, tiny_scenario):
    from rolloutlab.calibration.fits.turns_fit import fit_multi_turn, max_concurrent
    from rolloutlab.sim.trace.turns import write_turns

    res = _simulate_tools(tiny_scenario, 2.5, (0.2, 1.0, 0.7), 3, 4.0, 12, G=8, steps=6, prompts=8)
    write_turns(res.turns, tmp_path / "turns.parquet")
    from rolloutlab.calibration.fits.turns_fit import read_turns

    got = fit_multi_turn(read_turns(tmp_path / "turns.parquet"), 20.0, "t")["multi_turn"]
    assert got["sandboxes"] == 3 and got["tool_output_tokens"] == 12
    assert got["turns"]["max"] <= 6 and abs(got["turns"]["mean"] - 2.5) < 0.3
    lat = got["tool_latency"]
    assert abs(lat["scale_s"] - 1.0) < 0.25 and abs(lat["sigma"] - 0.7) < 0.2
    assert got["timeout_s"] == pytest.approx(4.0)
    assert max_concurrent(np.array([0.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0])) == 1


def test_cli_sim_writes_turns_and_calibrate_turns_reads_them(tmp_path):
    from click.testing import CliRunner
    from rolloutlab.sim.scenario.scenario import load_scenario

    from rolloutlab.cli import main

    run = tmp_path / "o"
    args = ["sim", "--scenario", "agentic_tools", "--steps", "2", "--prompts", "8"]
    res = CliRunner().invoke(
        main, [*args, "--controller", "static:4", "--no-figure", "--out", str(run)]
    )
    assert res.exit_code == 0, res.output
    assert "turns_mean" in pl.read_csv(run / "summary.csv").columns
    out = tmp_path / "fitted.json"
    res = CliRunner().invoke(
        main,
        [
            "calibrate",
            "turns",
            str(run / "turns.parquet"),
            "--base",
            "agentic_tools",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    mt = load_scenario(out).multi_turn
    assert mt is not None and mt.tool_output_tokens == 128 and 0.0 <= mt.tool_latency.min_s < 0.4


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 20),
    st.integers(1, 20),
    st.integers(1, 10),
    st.sampled_from([None, 1]),
)
def test_closed_form_with_one_sandbox(m, r0, r1, q, slots):
    """m two-turn rollouts, equal lengths, iteration a = 1/8 s whatever the batch, tool
    latency L = q a: turn 0 ends at r0 a for all; with one sandbox call i ends at
    r0 a + (i + 1) L (FIFO), unlimited all at r0 a + L; turn 1 then takes r1 a."""
    from rolloutlab.sim.models.cost import LinearCost

    a, L = 1 / 8, q / 8
    mt = MultiTurn(TurnLaw("fixed", 2.0, 2), ToolLatency(), sandboxes=slots)
    lengths = np.array([[r0] * m, [r1] * m])
    out = _run(
        LinearCost(a_s=a, b_s=0.0, c_s=0.0),
        EngineConfig(max_num_seqs=8),
        mt,
        np.zeros(m, dtype=np.int64),
        lengths,
        np.full(m, 2),
        np.full((m, 2), L),
    )
    waits = np.arange(1, m + 1) if slots == 1 else np.ones(m)
    np.testing.assert_array_equal(out.t_finish, r0 * a + waits * L + r1 * a)


def test_later_turns_prefill_only_the_tool_output_step_after_step():
    """One rollout of 2 turns per step, 30 steps in one engine: turn 1 always pays the
    prefill of the tool's 8 output tokens only (a + 8 p to its first token), never 0 (a
    stale cache hit) nor its whole context."""
    from rolloutlab.sim.models.cost import LinearCost

    a, p = 1 / 8, 1 / 32
    env = simpy.Environment()
    engine = Engine(env, LinearCost(a_s=a, b_s=0.0, c_s=0.0, prefill_s_per_token=p), EngineConfig())
    mt = MultiTurn(TurnLaw("fixed", 2.0, 2), ToolLatency(min_s=0.5), tool_output_tokens=8)
    rows = []
    for _ in range(30):
        out = submit_turns(
            engine,
            mt,
            None,
            np.array([0]),
            np.array([16]),
            np.array([[3], [5]]),
            np.array([2]),
            np.full((1, 2), 0.5),
            100,
        )
        env.run(until=out.done)
        rows += out.turn_rows
    later = [r for r in rows if r["turn"] == 1]
    assert len(later) == 30
    for r in later:
        assert r["context_tokens"] == 16 + 3 + 8 and r["t_first_token"] - r["t_submit"] == a + 8 * p
