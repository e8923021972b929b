"""Rewards in every pipeline: timing untouched, keyed draws shared, learning call sites,
what controllers observe, and the v2 trace columns."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.control.spec import parse_controller
from rolloutlab.sim.models.passrate import BetaPassRate, FixedPassRate
from rolloutlab.sim.models.reward_metrics import informative_by_step
from rolloutlab.sim.models.rewards import RewardConfig
from rolloutlab.sim.pipelines.async_pipeline import run_pipeline
from rolloutlab.sim.pipelines.spec import parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig, run_sync
from rolloutlab.sim.pipelines.sync_fast import run_sync_fast
from rolloutlab.sim.trace import schema as trace
from scipy.special import expit, logit

V1_STEP = [c for c in trace.STEP_SCHEMA if c not in trace.V2_COLUMNS["steps"]]
V1_ROLLOUT = [c for c in trace.ROLLOUT_SCHEMA if c not in trace.V2_COLUMNS["rollouts"]]
TIMING_STEP = [c for c in V1_STEP if c != "reward_mean"]


def _cfg(rewards=None, steps=6, **kw):
    return RunConfig(steps=steps, prompts=4, seed=2, rewards=rewards, **kw)


RUNNERS = {
    "simpy": lambda sc, ctl, cfg: run_sync(sc, ctl, cfg),
    "fast": lambda sc, ctl, cfg: run_sync_fast(sc, ctl, cfg),
    "async-sync": lambda sc, ctl, cfg: run_pipeline(sc, ctl, cfg, parse_pipeline("sync"))[:2],
    "bounded": lambda sc, ctl, cfg: run_pipeline(sc, ctl, cfg, parse_pipeline("bounded:2"))[:2],
}


@pytest.mark.parametrize("runner", list(RUNNERS))
def test_rewards_do_not_change_timing(tiny_scenario, runner):
    run = RUNNERS[runner]
    r0, s0 = run(tiny_scenario, parse_controller("sagc"), _cfg())
    r1, s1 = run(tiny_scenario, parse_controller("sagc"), _cfg(RewardConfig(BetaPassRate(1, 2))))
    assert_frame_equal(r0.select(V1_ROLLOUT), r1.select(V1_ROLLOUT))
    assert_frame_equal(s0.select(TIMING_STEP), s1.select(TIMING_STEP))
    assert r0["reward"].is_null().all() and s0["informative_frac"].is_null().all()
    assert s0["reward_mean"].is_null().all()
    assert r1["reward"].is_not_null().all() and s1["informative_frac"].is_not_null().all()
    assert (r1["reward"] == r1["correct"].cast(pl.Float64)).all()


def test_pipelines_draw_the_same_rewards(tiny_scenario):
    cfg = _cfg(RewardConfig(BetaPassRate(0.6, 1.4)), steps=5)
    out = [RUNNERS[k](tiny_scenario, parse_controller("static:4"), cfg) for k in RUNNERS]
    for r, s in out[1:3]:
        assert r["reward"].equals(out[0][0]["reward"])
        assert s["reward_mean"].equals(out[0][1]["reward_mean"])


def test_step_columns_agree_with_the_rollout_table(tiny_scenario):
    rollouts, steps = run_sync(
        tiny_scenario, parse_controller("static:3"), _cfg(RewardConfig(FixedPassRate(0.4)))
    )
    by = informative_by_step(rollouts)
    assert by["informative_groups"].equals(steps["informative_groups"])
    assert np.allclose(by["reward_mean"].to_numpy(), steps["reward_mean"].to_numpy())
    assert (steps["generated_groups"] == 4).all() and (steps["gen_rounds"] == 1).all()


class _Recorder(StaticG):
    """A static controller that asks for every extra (what observe_step hands over)."""

    observes = ("rewards", "prompt_ids", "gen_time_s", "step_time_s")

    def __init__(self, G):
        super().__init__(G)
        self.seen = []

    def observe(self, lengths, rewards=None, prompt_ids=None, gen_time_s=None, step_time_s=None):
        super().observe(lengths)
        self.seen.append((np.asarray(rewards), np.asarray(prompt_ids), gen_time_s, step_time_s))


@pytest.mark.parametrize("runner", list(RUNNERS))
def test_controllers_observe_rewards_and_prompt_ids(tiny_scenario, runner):
    ctl = _Recorder(3)
    rollouts, steps = RUNNERS[runner](
        tiny_scenario, ctl, _cfg(RewardConfig(FixedPassRate(0.5)), steps=4)
    )
    assert len(ctl.seen) >= 3
    rewards, ids, gen, step = ctl.seen[0]
    assert rewards.shape == (4, 3) and set(np.unique(rewards)) <= {0.0, 1.0}
    first = rollouts.filter(pl.col("prompt_id").is_in(ids.tolist())).sort("prompt_id", "sample_idx")
    assert np.array_equal(first["reward"].to_numpy().reshape(4, 3), rewards[np.argsort(ids)])
    assert gen > 0 and step >= gen


# --- learning call sites, tested with a stand-in for rolloutlab.sim.models.learning ----------------


@dataclass(frozen=True)
class _Params:
    kappa: float


class _StandIn:
    """theta += kappa * (informative trained groups) / B; records what update gets."""

    calls: list = []

    def __init__(self, params, staleness=None, seed=0):
        self.params, self.theta = params, 0.0

    def current(self, p0):
        with np.errstate(divide="ignore"):
            return expit(logit(np.asarray(p0, dtype=float)) + self.theta)

    def update(self, rewards, lr, staleness, step, batch_size):
        n_inf = sum(bool(np.ptp(r) > 0) for r in rewards)
        d = self.params.kappa * n_inf / batch_size
        _StandIn.calls.append((len(rewards), staleness, step, batch_size))
        self.theta += d
        return d

    def state_dict(self):
        return {"theta": self.theta}

    def load_state_dict(self, d):
        self.theta = d["theta"]


@pytest.fixture
def stand_in(monkeypatch):
    mod = types.ModuleType("rolloutlab.sim.models.learning")
    mod.LearningModel, mod.LearningParams = _StandIn, _Params
    monkeypatch.setitem(sys.modules, "rolloutlab.sim.models.learning", mod)
    _StandIn.calls = []
    return _StandIn


@pytest.mark.parametrize("runner", ["simpy", "fast", "bounded"])
def test_pass_rates_move_only_with_learning_and_not_when_fixed(tiny_scenario, stand_in, runner):
    run = RUNNERS[runner]
    learn = RewardConfig(BetaPassRate(1, 3), learning=_Params(kappa=0.5))
    _, s = run(tiny_scenario, parse_controller("static:4"), _cfg(learn, steps=40))
    early, late = s["reward_mean"][:10].mean(), s["reward_mean"][-10:].mean()
    assert late > early + 0.15  # the stand-in raises every logit by ~0.5 * 0.6 per step
    assert len(stand_in.calls) == 40 and all(c[0] == 4 and c[3] == 4 for c in stand_in.calls)
    if runner == "bounded":
        assert all(c[1] is not None and len(c[1]) == 4 for c in stand_in.calls)
    stand_in.calls.clear()
    frozen = RewardConfig(FixedPassRate(0.3), learning=_Params(kappa=0.5))
    assert not frozen.learns
    _, s = run(tiny_scenario, parse_controller("static:4"), _cfg(frozen, steps=40))
    assert stand_in.calls == []  # fixed:P is frozen
    none = RewardConfig(BetaPassRate(1, 3))  # no learning params: initial pass rates
    _, s0 = run(tiny_scenario, parse_controller("static:4"), _cfg(none, steps=40))
    assert abs(s0["reward_mean"].mean() - 0.25) < 0.08


# --- trace schema v2 ------------------------------------------------------------------------


def test_version_1_files_still_read(tmp_path, tiny_scenario):
    import pyarrow.parquet as pq

    rollouts, steps = run_sync(tiny_scenario, parse_controller("static:2"), _cfg(steps=2))
    for kind, df, cols in (("rollouts", rollouts, V1_ROLLOUT), ("steps", steps, V1_STEP)):
        table = df.select(cols).to_arrow()
        meta = {trace.META_KEY: b"1", b"rolloutlab.kind": kind.encode()}
        pq.write_table(table.replace_schema_metadata(meta), tmp_path / f"{kind}.parquet")
        back = trace.read(tmp_path / f"{kind}.parquet", kind)
        assert list(back.columns) == list(trace._schema_for(kind))
        assert all(back[c].is_null().all() for c in trace.V2_COLUMNS[kind])
        (tmp_path / f"{kind}.jsonl").write_text(
            "".join(
                f'{{"schema_version": 1, {line[1:]}\n'
                for line in df.select(cols).write_ndjson().splitlines()
            )
        )
        assert trace.read(tmp_path / f"{kind}.jsonl", kind).height == df.height


def test_v2_tables_round_trip(tmp_path, tiny_scenario):
    rollouts, steps = run_sync(
        tiny_scenario, parse_controller("static:2"), _cfg(RewardConfig(FixedPassRate(0.5)))
    )
    trace.write_parquet(rollouts, tmp_path / "r.parquet", "rollouts")
    trace.write_parquet(steps, tmp_path / "s.parquet", "steps")
    assert_frame_equal(trace.read(tmp_path / "r.parquet", "rollouts"), rollouts)
    assert_frame_equal(trace.read(tmp_path / "s.parquet", "steps"), steps)


def test_fast_path_equals_simpy_while_learning(tiny_scenario, stand_in):
    learn = RewardConfig(BetaPassRate(1, 3), learning=_Params(kappa=0.5))
    for spec in ("static:4", "sagc"):  # a block of steps, and step by step
        r1, s1 = run_sync(tiny_scenario, parse_controller(spec), _cfg(learn, steps=30))
        r2, s2 = run_sync_fast(tiny_scenario, parse_controller(spec), _cfg(learn, steps=30))
        assert r1["reward"].equals(r2["reward"])
        assert_frame_equal(s1, s2, check_exact=False, rel_tol=1e-9)


class _Proposer(StaticG):
    """Records the prompt ids it is asked to propose G for."""

    proposes = ("prompt_ids",)

    def __init__(self, G):
        super().__init__(G)
        self.asked = []

    def propose(self, prompt_ids=None):
        self.asked.append(np.asarray(prompt_ids).tolist())
        return super().propose()


@pytest.mark.parametrize("runner", list(RUNNERS))
def test_controllers_propose_for_the_prompts_about_to_be_generated(tiny_scenario, runner):
    ctl = _Proposer(2)
    rollouts, _ = RUNNERS[runner](tiny_scenario, ctl, _cfg(RewardConfig(FixedPassRate(0.5))))
    assert ctl.asked[:3] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    if runner != "bounded":  # streaming: a step takes the first groups done, any batch
        step0 = rollouts.filter(pl.col("step") == 0)["prompt_id"].unique().sort().to_list()
        assert step0 == [0, 1, 2, 3]


@pytest.mark.parametrize("runner", ["simpy", "fast"])
def test_propose_sees_the_first_round_with_dynamic_sampling(tiny_scenario, runner):
    from rolloutlab.sim.pipelines.dynamic_sampling import DynamicSampling

    ctl = _Proposer(3)
    cfg = _cfg(RewardConfig(FixedPassRate(0.5)), dynamic=DynamicSampling(1.5, 2, "batch"))
    RUNNERS[runner](tiny_scenario, ctl, cfg)
    assert ctl.asked[0] == list(range(6))  # ceil(1.5 * 4) prompts of round 1


def test_all_synchronous_pipelines_agree_with_the_real_learning_model(tiny_scenario):
    from rolloutlab.sim.models.learning import LearningParams

    learn = RewardConfig(BetaPassRate(0.6, 1.4), learning=LearningParams(kappa=5.0))
    out = [
        RUNNERS[k](tiny_scenario, parse_controller("static:4"), _cfg(learn, steps=25))
        for k in ("simpy", "fast", "async-sync")
    ]
    for r, s in out[1:]:
        assert r["reward"].equals(out[0][0]["reward"])
        assert np.allclose(s["reward_mean"].to_numpy(), out[0][1]["reward_mean"].to_numpy())
    means = out[0][1]["reward_mean"].to_numpy()
    assert means[-8:].mean() > means[:8].mean()  # pass rates rise as it trains
