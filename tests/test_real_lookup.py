"""The lookup task (multi-turn): tool calls park a sequence in the torch
engine, the tool's output joins the context off the loss mask, and a real run writes a
turns table that ``calibrate turns`` fits."""

import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.calibration.fits.turns_fit import calibrate_turns
from rolloutlab.real.engines.interface import RolloutRequest
from rolloutlab.real.engines.sampling import SamplingParams
from rolloutlab.real.engines.torch_engine import TorchEngine
from rolloutlab.real.policy.learner import pack
from rolloutlab.real.policy.model import build_model, load_config
from rolloutlab.real.runners.sync import run_sync
from rolloutlab.real.tasks.lookup import (
    LookupConfig,
    LookupProblem,
    is_correct,
    sample_lookup_problems,
    solution_ids,
    tool_for,
)
from rolloutlab.real.tasks.tokenizer import encode
from rolloutlab.sim.trace.turns import validate_turns

from tests.real_helpers import tiny_config
from tests.test_real_engine import TickClock


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31))
def test_solutions_verify_and_the_prompt_hides_the_table(seed):
    rng = np.random.default_rng(seed)
    (p,) = sample_lookup_problems(rng, LookupConfig(), 1)
    assert is_correct(p, solution_ids(p)) and not any(c.isdigit() for c in p.prompt_text)
    assert not is_correct(p, solution_ids(p)[:-2] + solution_ids(p)[-1:])
    out, lat = tool_for(p, LookupConfig(), seed)(encode("a?"))
    assert out == encode(str(p.table[0])) and lat >= LookupConfig().latency_min_s


@functools.cache
def _model():
    return build_model(load_config(), seed=0).eval()


def scripted_engine(script: list[int], prompt_len: int) -> TorchEngine:
    """A torch engine whose model always predicts ``script[position + 1 - prompt_len]``
    (a huge logit): what it samples is known in advance."""
    model = _model()
    V = model.cfg.vocab_size

    def forward_cached(ids, slots, start, cache):
        pos = start[:, None] + torch.arange(ids.shape[1]) + 1 - prompt_len  # (N, T)
        logits = torch.full((*ids.shape, V), -1e4)
        tgt = torch.tensor(script + [0])[pos.clamp(0, len(script))]
        return logits.scatter(2, tgt[..., None], 1e4)

    model.forward_cached = forward_cached
    return TorchEngine(model, 4, TickClock())


def test_a_tool_call_parks_the_sequence_and_its_output_joins_the_context_off_the_loss():
    """Queries a, c (table a=3, c=7): three turns; the model's own prediction at the tool
    output's positions (9) is never used: the tool's digits are."""
    p = LookupProblem(tuple([3, 0, 7] + [0] * 13), (0, 2))
    truth = solution_ids(p)  # a ? 3 c ? 7 = 3 7 <eos>
    script = [encode("9")[0] if i in (2, 5) else t for i, t in enumerate(truth)]
    calls = []

    def tool(resp):
        calls.append(len(resp))
        return p.answer(resp[-2]), 0.5 * len(calls)

    P = len(p.prompt_ids)
    req = RolloutRequest(0, tuple(p.prompt_ids), seed=1, tool=tool)
    (res,) = scripted_engine(script, P).generate([req], SamplingParams(max_response_length=16))
    assert res.response_ids == truth and res.finish_reason == "stop"
    assert res.tool_mask == [i in (2, 5) for i in range(len(truth))]
    assert [res.logprobs[i] for i in (2, 5)] == [0.0, 0.0]
    t = res.turns
    assert [x["finish_reason"] for x in t] == ["tool_call", "tool_call", "stop"]
    assert [x["response_tokens"] for x in t] == [2, 2, 4]
    assert [x["context_tokens"] for x in t] == [P, P + 3, P + 6]
    assert [x["prefill_tokens"] for x in t] == [P, 2, 2]  # tool token + its output
    for k in range(2):
        assert t[k]["t_tool_end"] - t[k]["t_tool_request"] == 0.5 * (k + 1)
        assert t[k + 1]["t_submit"] == t[k]["t_tool_end"] < t[k + 1]["t_first_token"]
    batch = pack([p.prompt_ids], [res.response_ids], [res.logprobs], torch.ones(1), [res.tool_mask])
    on = batch.mask[0, P - 1 : P - 1 + len(truth)]
    assert on.tolist() == [0.0 if m else 1.0 for m in res.tool_mask]
    assert batch.mask.sum() == len(truth) - 2


def test_a_real_lookup_run_writes_turns_that_calibrate_turns_fits(tmp_path):
    cfg = tiny_config(task_name="lookup", steps=2, eval_every=100, max_response_length=16)
    run_sync(cfg, tmp_path, progress=False)
    turns = validate_turns(pl.read_parquet(tmp_path / "turns.parquet"))
    rollouts = pl.read_parquet(tmp_path / "rollouts.parquet")
    keys = ["step", "prompt_id", "sample_idx"]
    per = turns.group_by(keys).agg(pl.col("response_tokens").sum(), pl.len().alias("n"))
    joined = rollouts.join(per, on=keys, suffix="_turns")
    assert len(joined) == len(rollouts) == 2 * cfg.prompts * 2
    # a rollout's tokens: its turns' sampled tokens plus at most one tool token per call
    extra = joined["response_tokens"] - joined["response_tokens_turns"]
    assert ((extra >= 0) & (extra <= joined["n"] - 1)).all()
    calls = turns.filter(pl.col("finish_reason") == "tool_call")
    assert (calls["t_tool_end"] > calls["t_tool_start"]).all()
    fit = calibrate_turns(tmp_path / "turns.parquet", "gsm8k")
    assert fit["fit"]["multi_turn"]["tool_calls"] == len(calls)


def test_a_lookup_request_survives_pickling_for_the_async_generator():
    """``real async`` sends requests to its generator process: the tool must pickle and
    draw the same latencies there."""
    import pickle

    (p,) = sample_lookup_problems(np.random.default_rng(0), LookupConfig(), 1)
    req = RolloutRequest(0, tuple(p.prompt_ids), seed=5, tool=tool_for(p, LookupConfig(), 5))
    copy = pickle.loads(pickle.dumps(req))
    assert copy.tool is not None and req.tool is not None
    assert [copy.tool(encode("b?")) for _ in range(3)] == [req.tool(encode("b?")) for _ in range(3)]


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31), st.lists(st.floats(0.0, 1.0), min_size=3, max_size=3))
def test_turn_rows_add_up_for_any_problem_and_latencies(seed, lats):
    """A model that answers right: ``queries + 1`` turns; sampled plus tool tokens make the
    response; each turn starts when the previous tool returns and its context is the last
    one's plus that turn's tokens and the tool's output (its prefill: the tool token and the
    output). (Latencies <= 1: the tick clock passes them without a real sleep.)"""
    (p,) = sample_lookup_problems(np.random.default_rng(seed), LookupConfig(), 1)
    truth, it = solution_ids(p), iter(lats)
    P = len(p.prompt_ids)
    req = RolloutRequest(0, tuple(p.prompt_ids), 1, lambda r: (p.answer(r[-2]), next(it)))
    (res,) = scripted_engine(truth, P).generate([req], SamplingParams(max_response_length=16))
    t, k = res.turns, len(p.queries)
    assert res.response_ids == truth and len(t) == k + 1 and sum(res.tool_mask) == k
    assert sum(x["response_tokens"] for x in t) + k == len(truth)
    for a, b in zip(t, t[1:]):
        assert b["t_submit"] == a["t_tool_end"] == a["t_tool_request"] + lats[a["turn"]]
        assert b["context_tokens"] == a["context_tokens"] + a["response_tokens"] + 1
        assert b["prefill_tokens"] == 2
