"""Controllers explain themselves: every step row carries the reason of
the decision, and SAGC with a step-time budget refuses raises predicted over budget."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.control.controllers import SAGC, StaticG
from rolloutlab.sim.control.observation import reason_json

STREAM = st.lists(st.lists(st.integers(1, 4000), min_size=1, max_size=6), min_size=1, max_size=40)


def play(ctl: SAGC, steps: list[list[int]], seconds_per_g: float) -> list[tuple[int, int]]:
    """Run ``ctl`` on a stream whose step time is exactly ``seconds_per_g * G``; returns
    ``(G before, G proposed)`` per step."""
    out = []
    for base in steps:
        G = ctl.current
        lengths = [[base[(j + k) % len(base)] + k for k in range(G)] for j in range(4)]
        ctl.observe(lengths, step_time_s=seconds_per_g * G)
        out.append((G, ctl.propose()))
    return out


@settings(max_examples=60, deadline=None)
@given(
    steps=STREAM,
    seconds_per_g=st.floats(0.1, 100.0),
    budget=st.floats(1.0, 2000.0),
    seed=st.integers(0, 1000),
    delta=st.floats(0.05, 0.95),
)
def test_sagc_never_raises_g_into_a_predicted_overrun(steps, seconds_per_g, budget, seed, delta):
    """With step time c G observed exactly, a raise never lands on a G with c G over the
    budget, and the reason names the refusal whenever a larger neighbour was refused."""
    ctl = SAGC(candidates=(2, 4, 8, 16, 32), step_time_budget_s=budget, seed=seed, delta=delta)
    for before, after in play(ctl, steps, seconds_per_g):
        if after > before:
            assert seconds_per_g * after <= budget * (1 + 1e-12)
        reason = ctl.explain()
        refused = [c["G"] for c in reason["candidates"] if c.get("refused") == "budget"]
        assert all(seconds_per_g * g > budget for g in refused)
        assert all(g > before for g in refused)
        assert ("raise refused" in reason["why"]) == bool(refused)


@settings(max_examples=40, deadline=None)
@given(steps=STREAM, seed=st.integers(0, 1000))
def test_an_unreachable_budget_changes_no_decision(steps, seed):
    """A budget no step reaches refuses nothing and marks no straggler: SAGC's decisions
    are the budget-free ones (the random stream does not depend on the budget)."""
    a = SAGC(seed=seed)
    b = SAGC(seed=seed, step_time_budget_s=1e300)
    assert play(a, steps, 1.0) == play(b, steps, 1.0)
    assert a.lam == b.lam and a.alpha == b.alpha


def test_reasons_are_json_and_name_threshold_and_candidates():
    ctl = SAGC(candidates=(4, 8, 16), tau=4.0, step_time_budget_s=10.0)
    ctl.observe([[100, 100, 100, 100, 100, 100, 100, 5000]], step_time_s=12.0)
    ctl.propose()
    r = json.loads(reason_json(ctl))
    assert r["after"]["crossed"] == ["tau", "budget"] and r["after"]["S_t"] == 1
    assert [c["G"] for c in r["candidates"]] == [4, 8, 16]
    assert r["budget_s"] == 10.0 and r["candidates"][2]["predicted_step_s"] == 24.0
    assert r["candidates"][2]["refused"] == "budget" and r["G"] in (4, 8)
    assert json.loads(reason_json(StaticG(8))) == {"G": 8, "why": "static"}
    assert reason_json(object()) is None


def test_budget_state_round_trips():
    ctl = SAGC(step_time_budget_s=50.0, seed=3)
    play(ctl, [[10, 20, 300]] * 5, 2.0)
    copy = SAGC(step_time_budget_s=50.0, seed=3)
    copy.load_state_dict(json.loads(json.dumps(ctl.state_dict())))
    assert copy.step_s == ctl.step_s
    assert [copy.propose() for _ in range(5)] == [ctl.propose() for _ in range(5)]
    assert "step_s" not in SAGC().state_dict()  # no budget: no step_s in the state


def test_step_tables_carry_the_reason():
    from rolloutlab.sim.pipelines.sync import RunConfig
    from rolloutlab.sim.pipelines.sync_fast import run_sync_fast
    from rolloutlab.sim.scenario.scenario import load_scenario

    sc = load_scenario("sim/data/gsm8k.json")
    cfg = RunConfig(steps=3, prompts=8)
    for ctl in (SAGC(step_time_budget_s=30.0), StaticG(4)):
        _, steps = run_sync_fast(sc, ctl, cfg)
        reasons = [json.loads(r) for r in steps["controller_reason"]]
        assert len(reasons) == 3 and all("G" in r and "why" in r for r in reasons)
    assert np.isfinite(steps["t_end"].to_numpy()).all()
