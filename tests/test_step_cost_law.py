"""The mechanism step-cost law (analysis/learning/step_cost_law.py): the engine replay
against the torch engine itself, features and fits by hand."""

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rolloutlab.analysis.learning.step_cost_law import (
    CostLaw,
    RunSteps,
    engine_work,
    fit_law,
    kept_rollouts,
    predict_setting,
    step_features,
)


def test_engine_work_by_hand():
    # capacity 2, responses 3, 1, 2; prompts 5, 7, 4
    # call 1: prefill rows 0, 1 (2 x 7 tokens); row 1 done (length 1); row 0 has 2 left
    # call 2: prefill row 2 (4 tokens); it has 1 left
    # call 3: decode rows 0, 2 (2 rows); row 2 done, row 0 has 1 left
    # call 4: decode row 0; done
    assert engine_work([5, 7, 4], [3, 1, 2], 2) == (2, 2, 3, 18)


@given(
    st.lists(st.tuples(st.integers(1, 30), st.integers(1, 40)), min_size=1, max_size=40),
    st.integers(1, 16),
)
def test_every_token_is_generated_once(rows, capacity):
    prompts, lengths = map(list, zip(*rows, strict=True))
    prefills, decodes, decoded, _ = engine_work(prompts, lengths, capacity)
    assert decoded == sum(lengths) - len(lengths)  # first token from the prefill
    assert prefills >= -(-len(lengths) // capacity)
    assert decodes >= max(lengths) - 1
    if capacity >= len(lengths):  # one wave: as long as the longest response
        assert (prefills, decodes) == (1, max(lengths) - 1)


def test_engine_work_matches_the_torch_engine():
    torch = pytest.importorskip("torch")
    from rolloutlab.real.engines.interface import RolloutRequest
    from rolloutlab.real.engines.sampling import SamplingParams
    from rolloutlab.real.engines.torch_engine import TorchEngine
    from rolloutlab.real.policy.model import build_model, load_config

    class Counting(TorchEngine):
        prefills = prefill_tokens = 0

        def _prefill(self, admitted, params):
            self.prefills += 1
            self.prefill_tokens += len(admitted) * max(len(p) for _, p in admitted)
            super()._prefill(admitted, params)

    model = build_model(load_config(), seed=3).eval()
    reqs = [RolloutRequest(i, tuple(range(3, 5 + i % 6)), seed=100 + i) for i in range(11)]
    engine = Counting(model, 3, lambda: 0.0)
    with torch.no_grad():
        res = engine.generate(reqs, SamplingParams(1.0, 1.0, max_response_length=12))
    want = engine_work([len(r.prompt_ids) for r in reqs], [len(x.response_ids) for x in res], 3)
    decoded = sum(len(x.response_ids) - 1 for x in res)
    assert want == (engine.prefills, engine.decode_iterations, decoded, engine.prefill_tokens)


def test_kept_rollouts_drop_groups_of_equal_rewards():
    correct = np.array([[1, 1], [0, 1], [0, 0]], bool)
    assert kept_rollouts(correct, True).tolist() == [[False, False], [True, True], [False, False]]
    assert kept_rollouts(correct, False).all()


def test_step_features_pad_the_trained_rollouts_to_the_longest():
    prompts, lengths = np.array([5, 7, 4, 9]), np.array([3, 1, 2, 30])
    kept = np.array([True, True, True, False])  # the 9 + 30 rollout is not trained
    f = step_features(prompts, lengths, kept, capacity=8)
    assert (f["rows"], f["cells"]) == (3, 3 * 8)  # longest trained: 5 + 3
    assert f["decoded_rows"] == 2 + 0 + 1 + 29


def _run(G, B, steps, groups, cpu):
    feats = [step_features(g[..., 0].ravel(), g[..., 1].ravel(),
                           kept_rollouts(g[..., 2], True).ravel(), 64) for g in groups]  # fmt: skip
    return RunSteps(f"g{G}_b{B}", G, B, 64, groups, pl.DataFrame(feats), cpu)


def test_fit_recovers_coefficients_from_exact_costs_and_predicts_by_hand():
    rng = np.random.default_rng(0)
    gen = {"one": 0.01, "calls": 0.002, "decoded_rows": 1e-4, "prefill_tokens": 2e-5}
    train = {"one": 0.05, "cells": 3e-5, "rows": 1e-4}
    runs = []
    for G, B in ((4, 4), (8, 4), (4, 16), (16, 8)):
        groups = [np.stack([rng.integers(5, 30, (B, G)), rng.integers(1, 40, (B, G)),
                            rng.integers(0, 2, (B, G))], axis=-1) for _ in range(6)]  # fmt: skip
        r = _run(G, B, 6, groups, None)
        y_gen = sum(r.features[k].to_numpy() * v for k, v in gen.items())
        y_train = sum(r.features[k].to_numpy() * v for k, v in train.items())
        cpu = pl.DataFrame({"gen": y_gen, "train": y_train, "sync": np.full(6, 0.003)})
        runs.append(RunSteps(r.name, G, B, 64, groups, r.features, cpu))
    law = fit_law(runs)
    assert law.gen == pytest.approx(gen, rel=1e-6)
    assert law.train == pytest.approx(train, rel=1e-6)
    assert law.sync_s == pytest.approx(0.003)
    # every group identical: the prediction is that one step's cost, whatever the draws
    one = np.array([[7, 3, 1], [7, 5, 0]])  # (G=2, 3): prompts 7, responses 3 and 5, mixed
    same = RunSteps("same", 2, 1, 64, [one[None]], pl.DataFrame(), pl.DataFrame())
    got = predict_setting(law, [same], G=2, B=3, steps=1, capacity=64, draws=5)
    # 6 rollouts: 1 prefill (6 x 7 tokens), 4 decodes, 2 + 4 rows each x 3 groups
    want = (0.01 + 0.002 * 5 + 1e-4 * 18 + 2e-5 * 42) + (0.05 + 3e-5 * 6 * 12 + 1e-4 * 6) + 0.003
    assert got == pytest.approx(want)


def test_predict_refuses_a_group_size_no_fit_run_has():
    law = CostLaw({"one": 0.0}, {"one": 0.0}, 0.0)
    run = RunSteps("r", 4, 1, 64, [np.ones((1, 4, 3), int)], pl.DataFrame(), pl.DataFrame())
    with pytest.raises(ValueError, match="groups of 8 or more"):
        predict_setting(law, [run], G=8, B=2, steps=1, capacity=64)
