"""The learner's ``trainable_layers``: only the last k decoder layers and the final norm
move, the optimiser holds only them, and k = 0 trains everything."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from rolloutlab.real.policy.learner import Learner, pack, trainable_parameters
from rolloutlab.real.policy.model import build_model, load_config
from rolloutlab.real.rundir.config import LearnerConfig


def _batch():
    g = torch.Generator().manual_seed(0)
    prompts = [[1, 40, 41], [1, 42, 43], [1, 44], [1, 45, 46, 47]]
    responses = [torch.randint(3, 60, (5,), generator=g).tolist() for _ in prompts]
    logprobs = [[-2.0] * 5 for _ in prompts]
    return pack(prompts, responses, logprobs, torch.tensor([1.0, -1.0, 0.5, -0.5]))


def _moved(k: int) -> set[str]:
    model = build_model(load_config(), seed=0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    cfg = dataclasses.replace(LearnerConfig(), trainable_layers=k, track_ref_kl=False, lr=1e-2)
    Learner(model, None, cfg).update(_batch(), torch.Generator().manual_seed(1))
    return {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}


def test_last_layer_only_moves_the_last_layer_and_the_final_norm():
    moved = _moved(1)
    assert moved and all(n.startswith(("model.layers.1.", "model.norm.")) for n in moved)
    assert "model.layers.1.self_attn.q_proj.weight" in moved


def test_zero_trains_every_parameter():
    model = build_model(load_config(), seed=0)
    assert _moved(0) == {n for n, _ in model.named_parameters()}


def test_optimiser_holds_only_the_trained_parameters():
    model = build_model(load_config(), seed=0)
    params = trainable_parameters(model, 1)
    layer = sum(p.numel() for p in model.model.layers[1].parameters())
    assert sum(p.numel() for p in params) == layer + model.cfg.hidden_size
    assert not model.model.embed_tokens.weight.requires_grad


def test_more_layers_than_the_model_has_is_refused():
    with pytest.raises(ValueError, match="trainable_layers must be in 0..2"):
        trainable_parameters(build_model(load_config(), seed=0), 3)


def test_zero_trains_a_copy_of_a_frozen_model_too():
    model = build_model(load_config(), seed=0).requires_grad_(False)
    assert all(p.requires_grad for p in trainable_parameters(model, 0))
