"""The torch rollout engine: recorded log-probs, batching-mode invariance, limits, sampling."""

import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.real.engines.interface import RolloutRequest
from rolloutlab.real.engines.sampling import SamplingParams, sample
from rolloutlab.real.engines.torch_engine import TorchEngine
from rolloutlab.real.policy.learner import pack, token_logprobs
from rolloutlab.real.policy.model import build_model, load_config
from rolloutlab.real.tasks.digit_chain import Problem


class TickClock:
    """A fake clock advancing one unit per reading (no wall-clock dependence)."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        self.t += 1.0
        return self.t


@pytest.fixture(scope="module")
def model():
    return build_model(load_config(), seed=3).double().eval()


def requests(n=10):
    probs = [Problem(tuple((i * 7 + k) % 10 for k in range(2 + i % 5))) for i in range(n)]
    return [RolloutRequest(i, tuple(p.prompt_ids), seed=100 + i) for i, p in enumerate(probs)]


PARAMS = SamplingParams(temperature=1.0, top_p=0.9, max_response_length=12)


def run(model, mode, capacity, reqs, params=PARAMS):
    return TorchEngine(model, capacity, TickClock(), mode).generate(reqs, params)


def test_continuous_and_static_batching_give_the_same_tokens_for_the_same_seeds(model):
    reqs = requests()
    cont = run(model, "continuous", 3, reqs)
    stat = run(model, "static", 4, reqs)
    assert [r.response_ids for r in cont] == [r.response_ids for r in stat]
    assert any(r.finish_reason == "stop" for r in cont) or all(
        len(r.response_ids) == 12 for r in cont
    )


def test_recorded_logprobs_equal_a_teacher_forced_forward(model):
    reqs = requests()
    res = run(model, "continuous", 3, reqs)
    batch = pack(
        [r.prompt_ids for r in reqs],
        [x.response_ids for x in res],
        [x.logprobs for x in res],
        torch.zeros(len(res)),
    )
    with torch.no_grad():
        tf = token_logprobs(model, batch.ids, PARAMS.temperature)
    assert torch.allclose(tf * batch.mask, batch.logp_behaviour, atol=1e-5)


def test_results_respect_the_cap_and_the_timestamp_order(model):
    res = run(model, "continuous", 2, requests(6), SamplingParams(max_response_length=5))
    for r in res:
        assert 1 <= len(r.response_ids) <= 5 and len(r.logprobs) == len(r.response_ids)
        assert r.finish_reason == (
            "length" if len(r.response_ids) == 5 and r.response_ids[-1] != 2 else "stop"
        )
        assert r.t_submit_s <= r.t_first_token_s <= r.t_finish_s


def test_a_prompt_that_cannot_fit_the_cache_is_refused(model):
    long_req = RolloutRequest(0, tuple([1] * 120), seed=0)
    with pytest.raises(ValueError, match="request 0"):
        run(model, "continuous", 2, [long_req])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(-4, 4), min_size=2, max_size=12), st.floats(0, 0.999), st.floats(0.05, 1.0)
)
def test_a_sampled_token_is_always_inside_the_top_p_nucleus(logits, u, top_p):
    x = torch.tensor([logits])
    tok = int(sample(x, torch.tensor([u]), SamplingParams(top_p=top_p)))
    p = torch.softmax(x[0], -1)
    mass_before = p[p > p[tok]].sum()  # mass of strictly more likely tokens
    assert mass_before < top_p + 1e-6


def test_greedy_takes_the_argmax():
    x = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.0]])
    assert sample(x, torch.zeros(2), SamplingParams(temperature=0.0)).tolist() == [1, 0]
