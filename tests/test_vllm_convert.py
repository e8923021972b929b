"""Conversion of recorded vLLM request outputs into rollouts and trace rows (no vllm needed)."""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest
from rolloutlab.real.engines.vllm_convert import (
    ClockAnchor,
    ClockError,
    VllmOutputError,
    read_anchor,
    rollout_result,
    rollout_results,
    sampled_logprobs,
)
from rolloutlab.sim.trace.schema import ROLLOUT_SCHEMA, validate

from tests.vllm_fixtures import MONO0, WALL0, Logprob, make_output

ANCHOR = ClockAnchor(run_s=10.0, wall_s=WALL0, mono_s=MONO0)


def _out(**kw):
    base = dict(
        rid="0",
        prompt=[1, 40, 41],
        tokens=[5, 6, 2],
        lps=[-0.1, -0.2, -0.05],
        arrival_off=0.001,
        first_off=0.010,
        last_off=0.030,
    )
    base.update(kw)
    return make_output(
        base.pop("rid"), base.pop("prompt"), base.pop("tokens"), base.pop("lps"), **base
    )


def test_each_clock_is_mapped_with_its_own_anchor():
    r = rollout_result(_out(), 7, ANCHOR, returned_s=10.1)
    assert r.request_id == 7 and r.prompt_tokens == 3 and r.response_ids == [5, 6, 2]
    assert r.t_submit_s == pytest.approx(10.001)
    assert r.t_first_token_s == pytest.approx(10.010)
    assert r.t_finish_s == pytest.approx(10.030)
    assert r.finish_reason == "stop" and r.logprobs == pytest.approx([-0.1, -0.2, -0.05])


def test_subtracting_across_clocks_would_be_absurd():
    # the two origins differ by ~1.76e9 s: a cross-clock difference cannot pass the window check
    out = _out()
    assert abs(out.metrics.first_token_ts - out.metrics.arrival_time) > 1e8
    r = rollout_result(out, 0, ANCHOR, returned_s=10.1)
    assert 0 <= r.t_first_token_s - r.t_submit_s < 0.05


def test_a_foreign_monotonic_clock_fails_loudly():
    other_process = _out(mono0=MONO0 + 3.0)  # engine stamps 3 s off the driver's monotonic clock
    with pytest.raises(ClockError, match="first_token_ts"):
        rollout_result(other_process, 0, ANCHOR, returned_s=10.1)


def test_small_cross_clock_skew_is_clamped_not_reversed():
    skewed = _out(arrival_off=0.0125, first_off=0.012)  # wall slightly ahead of monotonic
    r = rollout_result(skewed, 0, ANCHOR, returned_s=10.1)
    assert r.t_submit_s <= r.t_first_token_s <= r.t_finish_s


def test_length_finish_and_order_kept():
    outs = [
        _out(rid="0", tokens=[5, 5, 5, 5], lps=[-1.0] * 4, reason="length", last_off=0.05),
        _out(rid="1", tokens=[7, 2], lps=[-0.5, -0.01], last_off=0.02),
    ]
    res = rollout_results(outs, [3, 4], ANCHOR, returned_s=10.2, worker=1, policy_version=5)
    assert [r.request_id for r in res] == [3, 4]
    assert [r.finish_reason for r in res] == ["length", "stop"]
    assert all(r.worker == 1 and r.policy_version == 5 for r in res)


def test_rows_from_converted_outputs_validate_as_a_trace():
    outs = [
        _out(rid=str(i), first_off=0.01 + 0.001 * i, last_off=0.03 + 0.01 * i) for i in range(4)
    ]
    res = rollout_results(outs, list(range(4)), ANCHOR, returned_s=10.5)
    rows = [
        {
            "run_id": "r",
            "step": 0,
            "prompt_id": r.request_id // 2,
            "sample_idx": r.request_id % 2,
            "group_size": 2,
            "policy_version": 0,
            "learner_version": 0,
            "prompt_tokens": r.prompt_tokens,
            "response_tokens": len(r.response_ids),
            "finish_reason": r.finish_reason,
            "worker": r.worker,
            "t_submit": r.t_submit_s,
            "t_first_token": r.t_first_token_s,
            "t_finish": r.t_finish_s,
        }
        for r in res
    ]
    df = validate(pl.DataFrame(rows, schema=ROLLOUT_SCHEMA), "rollouts")
    assert df.height == 4 and df["t_finish"].max() == pytest.approx(10.06)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda o: setattr(o, "metrics", None), "disable_log_stats=False"),
        (lambda o: setattr(o.metrics, "first_token_ts", 0.0), "no request metrics"),
        (lambda o: setattr(o.outputs[0], "finish_reason", None), "not finished"),
        (lambda o: setattr(o.outputs[0], "finish_reason", "error"), "finish_reason 'error'"),
        (lambda o: o.outputs.append(o.outputs[0]), "exactly 1 sample"),
        (lambda o: setattr(o.outputs[0], "logprobs", None), "logprobs=0"),
        (lambda o: o.outputs[0].logprobs.pop(), "logprob positions"),
    ],
)
def test_bad_outputs_name_the_request(mutate, match):
    out = _out(rid="42")
    mutate(out)
    with pytest.raises(VllmOutputError, match=match) as exc:
        rollout_result(out, 0, ANCHOR, returned_s=10.1)
    assert "'42'" in str(exc.value)


def test_logprobs_accept_plain_floats_and_need_the_sampled_token():
    assert sampled_logprobs([3, 4], [{3: -0.5}, {4: Logprob(-0.25)}], "x") == [-0.5, -0.25]
    with pytest.raises(VllmOutputError, match="no logprob for sampled token 4"):
        sampled_logprobs([3, 4], [{3: -0.5}, {9: -0.1}], "x")
    with pytest.raises(VllmOutputError, match="not a log-probability"):
        sampled_logprobs([3], [{3: 0.5}], "x")


def test_counts_must_match():
    with pytest.raises(VllmOutputError, match="2 outputs for 3 requests"):
        rollout_results([_out(), _out()], [0, 1, 2], ANCHOR, returned_s=10.1)


def test_read_anchor_reads_three_consistent_clocks():
    import time

    a = read_anchor(lambda: 3.0)
    assert (
        a.run_s == 3.0 and abs(a.wall_s - time.time()) < 1 and abs(a.mono_s - time.monotonic()) < 1
    )
    assert a.from_wall(a.wall_s + 2) == pytest.approx(5.0) and a.from_mono(
        a.mono_s - 1
    ) == pytest.approx(2.0)
    assert dataclasses.is_dataclass(a)
