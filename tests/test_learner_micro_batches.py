"""The learner's ``micro_batch_size``: gradients accumulated over micro-batches are the
gradient of the whole batch at once (token-weighted), and the reported statistics merge.
(Gradients, not the updated weights, are compared: AdamW divides by the gradient's own
scale, so an element whose gradient is float noise moves by about lr either way.)"""

from __future__ import annotations

import copy
import dataclasses

import pytest

torch = pytest.importorskip("torch")

from rolloutlab.real.policy.learner import Learner, pack
from rolloutlab.real.policy.model import build_model, load_config
from rolloutlab.real.rundir.config import LearnerConfig


def _batch():
    g = torch.Generator().manual_seed(0)
    prompts = [[1, 40, 41], [1, 42, 43], [1, 44], [1, 45, 46, 47], [1, 48], [1, 49, 50]]
    lengths = [5, 2, 7, 3, 6, 1]  # unequal: micro-batches hold unequal token counts
    responses = [torch.randint(3, 60, (n,), generator=g).tolist() for n in lengths]
    logprobs = [(-2.0 - 0.1 * torch.rand(n, generator=g)).tolist() for n in lengths]
    return pack(prompts, responses, logprobs, torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0]))


def _update(micro: int):
    model = build_model(load_config(), seed=0)
    ref = copy.deepcopy(model)
    cfg = dataclasses.replace(LearnerConfig(), micro_batch_size=micro, lr=1e-2, kl_coef=0.1)
    stats = Learner(model, ref, cfg).update(_batch(), torch.Generator().manual_seed(1))
    return model, stats


@pytest.mark.parametrize("micro", [1, 2, 4])
def test_micro_batches_give_the_gradient_of_the_whole_batch(micro):
    whole, s_whole = _update(0)
    parts, s_parts = _update(micro)
    for (name, a), b in zip(whole.named_parameters(), parts.parameters()):
        assert a.grad is not None and b.grad is not None, name
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-7, msg=name)
    for field in ("loss", "pg_loss", "kl", "clip_frac", "entropy", "probs_diff_max", "ratio_max"):
        assert getattr(s_parts, field) == pytest.approx(getattr(s_whole, field), rel=1e-5, abs=1e-7)
    assert s_parts.n_tokens == s_whole.n_tokens == 24
