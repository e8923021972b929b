"""The compact Llama: cached decoding equals the full forward, and transformers agrees."""

import pytest

torch = pytest.importorskip("torch")

from rolloutlab.real.policy.model import (
    KVCache,
    build_model,
    load_config,
    load_pretrained,
    save_pretrained,
)


@pytest.fixture(scope="module")
def model():
    return build_model(load_config(), seed=0).eval()


def test_prefill_then_decode_at_per_slot_positions_equals_the_full_forward(model):
    ids = torch.randint(3, 60, (3, 14), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(ids)
        cache = KVCache.empty(model.cfg, n_slots=5, max_len=32)
        slots = torch.tensor([4, 0, 2])
        out = [model.forward_cached(ids[:, :6], slots, torch.zeros(3, dtype=torch.long), cache)]
        for t in range(6, 14):
            out.append(model.forward_cached(ids[:, t : t + 1], slots, torch.full((3,), t), cache))
    assert torch.allclose(torch.cat(out, 1), full, atol=1e-5)


def test_logits_match_transformers_llama_on_the_same_weights(model, tmp_path):
    transformers = pytest.importorskip("transformers")
    save_pretrained(model, tmp_path)
    hf = transformers.LlamaForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.randint(3, 60, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(hf(ids).logits, model(ids), atol=1e-5)


def test_save_and_load_round_trip_and_a_corrupt_file_names_itself(model, tmp_path):
    save_pretrained(model, tmp_path)
    again = load_pretrained(tmp_path)
    assert all(
        torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values())
    )
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="model.safetensors"):
        load_pretrained(tmp_path)


def test_tied_output_layer_matches_transformers_and_round_trips(tmp_path):
    import dataclasses

    transformers = pytest.importorskip("transformers")
    cfg = dataclasses.replace(load_config(), tie_word_embeddings=True, rope_theta=100_000.0)
    tied = build_model(cfg, seed=3).eval()
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    save_pretrained(tied, tmp_path)
    from safetensors.torch import load_file

    assert "lm_head.weight" not in load_file(str(tmp_path / "model.safetensors"))
    hf = transformers.LlamaForCausalLM.from_pretrained(tmp_path).eval()
    again = load_pretrained(tmp_path).eval()
    assert again.lm_head.weight is again.model.embed_tokens.weight
    ids = torch.randint(3, 60, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.allclose(hf(ids).logits, tied(ids), atol=1e-5)
        assert torch.equal(again(ids), tied(ids))


def test_config_reads_transformers_5_rope_parameters_and_refuses_scaling(tmp_path):
    import json

    from rolloutlab.real.policy.model import LlamaConfig

    raw = json.loads((load_config.__defaults__[0]).read_text())
    raw.pop("rope_theta")
    raw["rope_parameters"] = {"rope_theta": 5e5, "rope_type": "default"}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert LlamaConfig.from_json(tmp_path / "config.json").rope_theta == 5e5
    raw["rope_parameters"]["rope_type"] = "llama3"
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="RoPE scaling"):
        LlamaConfig.from_json(tmp_path / "config.json")
