"""The mechanism step-cost law (analysis/learning/step_cost_law.py): the engine replay
against the torch engine itself, features and fits by hand."""

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rolloutlab.analysis.learning.step_cost_law import (
    GEN_FEATURES_V1,
    TRAIN_FEATURES_V1,
    CostLaw,
    RunSteps,
    drawn_features,
    engine_work,
    fit_kept_share,
    fit_law,
    kept_rollouts,
    predict_setting,
    prompt_batch,
    prompt_pool,
    step_features,
)


def test_engine_work_by_hand():
    # capacity 2, responses 3, 1, 2; prompts 5, 7, 4
    # call 1: prefill rows 0, 1 (2 x 7 tokens); row 1 done (length 1); row 0 has 2 left
    # call 2: prefill row 2 (4 tokens); it has 1 left
    # call 3: decode rows 0 (position 5), 2 (position 4): window 6, 12 cells; row 2 done
    # call 4: decode row 0 (position 6): window 7, 7 cells; done
    assert engine_work([5, 7, 4], [3, 1, 2], 2) == (2, 2, 3, 18, 19)


@given(
    st.lists(st.tuples(st.integers(1, 30), st.integers(1, 40)), min_size=1, max_size=40),
    st.integers(1, 16),
)
def test_every_token_is_generated_once(rows, capacity):
    prompts, lengths = map(list, zip(*rows, strict=True))
    prefills, decodes, decoded, _, attended = engine_work(prompts, lengths, capacity)
    assert decoded == sum(lengths) - len(lengths)  # first token from the prefill
    # each decoded row attends at least to its own context, at most to the longest one
    own = sum(p * (n - 1) + (n - 1) * n // 2 for p, n in rows)
    assert own <= attended <= decoded * max(p + n for p, n in rows)
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

        attended_cells = 0

        def _decode(self, running, params):
            # forward_cached's window: the longest running position + 1, for every row
            self.attended_cells += len(running) * (max(s.length for s in running) + 1)
            super()._decode(running, params)

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
    assert want[:4] == (engine.prefills, engine.decode_iterations, decoded, engine.prefill_tokens)
    assert want.attended_cells == engine.attended_cells


def test_kept_rollouts_drop_groups_of_equal_rewards():
    correct = np.array([[1, 1], [0, 1], [0, 0]], bool)
    assert kept_rollouts(correct, True).tolist() == [[False, False], [True, True], [False, False]]
    assert kept_rollouts(correct, False).all()


def test_step_features_pad_the_trained_rollouts_to_the_longest():
    prompts, lengths = np.array([5, 7, 4, 9]), np.array([3, 1, 2, 30])
    kept = np.array([True, True, True, False])  # the 9 + 30 rollout is not trained
    f = step_features(prompts, lengths, kept, capacity=8, prompts=2)
    assert (f["rows"], f["cells"]) == (3, 3 * 8)  # longest trained: 5 + 3
    assert (f["attention_cells"], f["prompts"]) == (3 * 8 * 8, 2)
    assert f["decoded_rows"] == 2 + 0 + 1 + 29


def _run(G, B, steps, groups, cpu):
    feats = [step_features(g[..., 0].ravel(), g[..., 1].ravel(),
                           kept_rollouts(g[..., 2], True).ravel(), 64, B) for g in groups]  # fmt: skip
    return RunSteps(f"g{G}_b{B}", G, B, 64, groups, pl.DataFrame(feats), cpu)


def test_fit_recovers_coefficients_from_exact_costs_and_predicts_by_hand():
    rng = np.random.default_rng(0)
    gen = {"one": 0.01, "prompts": 1e-3, "calls": 0.002, "decoded_rows": 1e-4,
           "attended_cells": 1e-6, "prefill_tokens": 2e-5}  # fmt: skip
    train = {"one": 0.05, "rows": 1e-4, "cells": 3e-5, "attention_cells": 1e-7}
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
    # 6 rollouts: 1 prefill (6 x 7 tokens), 4 decodes, 2 + 4 rows each x 3 groups; the
    # decodes attend windows 8 and 9 (6 rows), then 10 and 11 (the 3 longer ones); trained:
    # 6 rows padded to 7 + 5
    attended = 6 * 8 + 6 * 9 + 3 * 10 + 3 * 11
    gen_s = 0.01 + 1e-3 * 3 + 0.002 * 5 + 1e-4 * 18 + 1e-6 * attended + 2e-5 * 42
    want = gen_s + (0.05 + 1e-4 * 6 + 3e-5 * 6 * 12 + 1e-7 * 6 * 12**2) + 0.003
    assert got == pytest.approx(want)


def test_predict_refuses_a_group_size_no_fit_run_has():
    law = CostLaw({"one": 0.0}, {"one": 0.0}, 0.0)
    run = RunSteps("r", 4, 1, 64, [np.ones((1, 4, 3), int)], pl.DataFrame(), pl.DataFrame())
    with pytest.raises(ValueError, match="groups of 8 or more"):
        predict_setting(law, [run], G=8, B=2, steps=1, capacity=64)


def test_v1_features_fit_alone():
    rng = np.random.default_rng(1)
    groups = [np.stack([rng.integers(5, 30, (4, 4)), rng.integers(1, 40, (4, 4)),
                        rng.integers(0, 2, (4, 4))], axis=-1) for _ in range(8)]  # fmt: skip
    r = _run(4, 4, 8, groups, None)
    cpu = pl.DataFrame({"gen": 0.002 * r.features["calls"].to_numpy() + 0.01,
                        "train": 3e-5 * r.features["cells"].to_numpy(), "sync": np.zeros(8)})  # fmt: skip
    law = fit_law([RunSteps(r.name, 4, 4, 64, groups, r.features, cpu)],
                  GEN_FEATURES_V1, TRAIN_FEATURES_V1)  # fmt: skip
    assert set(law.gen) == set(GEN_FEATURES_V1) and set(law.train) == set(TRAIN_FEATURES_V1)
    assert law.gen["calls"] == pytest.approx(0.002) and law.train["cells"] == pytest.approx(3e-5)


def test_a_batch_several_runs_hold_counts_once_in_the_draws():
    law = CostLaw({"decoded_rows": 1.0}, {"one": 0.0}, 0.0)
    short = np.array([[[5, 1, 1], [5, 1, 0]]])  # (B=1, G=2, 3): no decode rows
    long = np.array([[[5, 11, 1], [5, 11, 0]]])  # 10 decode rows each
    a, a_again, b = (RunSteps(n, 2, 1, 64, [g], pl.DataFrame(), pl.DataFrame())
                     for n, g in (("a", short), ("a2", short.copy()), ("b", long)))  # fmt: skip
    once = predict_setting(law, [a, b], G=2, B=1, steps=1, capacity=64, draws=40)
    assert predict_setting(law, [a, a_again, b], G=2, B=1, steps=1, capacity=64, draws=40) == once
    assert 0 < once < 20  # both batches drawn


def test_head_keeps_the_first_steps():
    groups = [np.full((1, 2, 3), i) for i in range(1, 4)]
    feats = pl.DataFrame({"one": [1.0, 1.0, 1.0]})
    cpu = pl.DataFrame({"gen": [1.0, 2.0, 3.0], "train": [0.0] * 3, "sync": [0.0] * 3})
    h = RunSteps("r", 2, 1, 64, groups, feats, cpu).head(2)
    assert len(h.groups) == 2 and h.cpu["gen"].to_list() == [1.0, 2.0] and h.features.height == 2


def test_a_feature_no_fit_step_had_gets_no_cost():
    groups = [np.array([[[5, 3, 1], [5, 4, 1]]]), np.array([[[5, 6, 0], [5, 2, 0]]])]
    r = _run(2, 1, 2, groups, None)  # every group all right or all wrong: nothing trained
    cpu = pl.DataFrame({"gen": [0.1, 0.2], "train": [0.01, 0.01], "sync": [0.0, 0.0]})
    law = fit_law([RunSteps(r.name, 2, 1, 64, groups, r.features, cpu)])
    assert law.train["rows"] == law.train["cells"] == law.train["attention_cells"] == 0.0
    assert law.train["one"] == pytest.approx(0.01)


def test_each_phase_is_priced_by_its_own_coefficients_and_the_step_is_their_sum():
    law = CostLaw({"one": 0.01, "calls": 0.002}, {"one": 0.05, "rows": 1e-4, "cells": 3e-5,
                  "attention_cells": 1e-7}, 0.003)  # fmt: skip
    feats = pl.DataFrame({"one": [1.0, 1.0], "calls": [10, 40], "rows": [0, 8],
                          "cells": [0, 8 * 20], "attention_cells": [0, 8 * 20 * 20]})  # fmt: skip
    # gen: 0.01 + 0.002 x 10 = 0.03; 0.01 + 0.002 x 40 = 0.09
    assert law.phase_s(feats, "gen") == pytest.approx([0.03, 0.09])
    # train: 0.05 (nothing trained); 0.05 + 8e-4 + 3e-5 x 160 + 1e-7 x 3200 = 0.05592
    assert law.phase_s(feats, "train") == pytest.approx([0.05, 0.05592])
    assert law.phase_s(feats, "sync") == pytest.approx([0.003, 0.003])
    assert law.step_s(feats) == pytest.approx([0.083, 0.14892])
    with pytest.raises(ValueError, match="phase must be one of"):
        law.phase_s(feats, "step")


def _groups_with_mixed(B, G, mixed, steps):
    """``steps`` (B, G, 3) batches whose first ``mixed`` groups are mixed (one right
    response), the rest all wrong."""
    batch = np.zeros((B, G, 3), int)
    batch[..., 0], batch[..., 1] = 10, 5
    batch[:mixed, 0, 2] = 1
    return [batch.copy() for _ in range(steps)]


def test_the_kept_share_model_fits_each_batch_size_share_and_extrapolates_in_log_b():
    # G = 2 at B = 4 (1 group in 4 mixed) and B = 8 (6 in 8), the same every step: the
    # logistic fits logit 0.25 = -ln 3 at B = 4, +ln 3 at B = 8, so 2 ln 3 per doubling
    # of B and logit 3 ln 3 at B = 16: share 27 / 28; no dependence on the step
    a = RunSteps("a", 2, 4, 64, _groups_with_mixed(4, 2, 1, 10), pl.DataFrame(), pl.DataFrame())
    b = RunSteps("b", 2, 8, 64, _groups_with_mixed(8, 2, 6, 10), pl.DataFrame(), pl.DataFrame())
    a_c8 = RunSteps("a8", 2, 4, 8, a.groups, pl.DataFrame(), pl.DataFrame())  # counts once
    for runs in ([a, b], [a, a_c8, b]):
        share = fit_kept_share(runs)
        assert share.share(2, 4, 0) == pytest.approx(0.25, abs=0.01)
        assert share.share(2, 8, 9) == pytest.approx(0.75, abs=0.01)
        assert share.share(2, 16, 5) == pytest.approx(27 / 28, abs=0.01)
        assert share.coef[3] == pytest.approx(0.0, abs=0.01)
    none = RunSteps("n", 2, 4, 64, _groups_with_mixed(4, 2, 0, 3), pl.DataFrame(), pl.DataFrame())
    assert fit_kept_share([none]).share(16, 64, 3) == 0.0  # no mixed group seen: none kept
    with pytest.raises(ValueError, match="no group"):
        fit_kept_share([])


def _prompt_run(B, steps, seed=0, G=2):
    """A run whose step-s prompt i has prompt length 10 s + i (so a drawn batch names its
    prompts) and responses of 3 tokens, all wrong."""
    groups = []
    for s in range(steps):
        g = np.zeros((B, G, 3), int)
        g[..., 0] = (10 * s + np.arange(B))[:, None]
        g[..., 1] = 3
        groups.append(g)
    return RunSteps(f"b{B}_s{seed}", G, B, 64, groups, pl.DataFrame(), pl.DataFrame(), seed)


def test_a_prompt_several_runs_hold_is_one_prompt_and_seeds_name_others():
    small, large, other = _prompt_run(1, 2), _prompt_run(2, 2), _prompt_run(2, 2, seed=1)
    pool = prompt_pool([small, large], G=2)
    assert [sorted(step) for step in pool] == [[(0, 0), (0, 1)], [(0, 0), (0, 1)]]
    # small's prompt 0 is large's (same seed); their groups are the same: held once
    assert len(pool[0][(0, 0)]) == 1
    assert sorted(prompt_pool([large, other], G=2)[1]) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert prompt_pool([large], G=4) == []  # no run has groups of 4


def test_a_prompt_batch_takes_distinct_prompts_from_the_nearest_steps():
    pool = prompt_pool([_prompt_run(2, 5)], G=2)  # steps 0-4, two prompts each
    rng = np.random.default_rng(0)
    for _ in range(20):
        # B = 4 at step 2 without dynamic sampling: step 2, then step 1 (the earlier of
        # the two nearest), each prompt once
        batch = prompt_batch(pool, 2, 4, 2, 4, False, rng)
        assert batch.shape == (4, 2, 3)
        assert sorted(batch[:, 0, 0]) == [10, 11, 20, 21]
    batch = prompt_batch(pool, 2, 12, 0, 12, False, rng)  # 10 prompts in all, 2 again
    assert batch.shape == (12, 2, 3) and set(batch[:, 0, 0]) == {
        0,
        1,
        10,
        11,
        20,
        21,
        30,
        31,
        40,
        41,
    }


def test_a_prompt_batch_holds_as_many_kept_groups_as_asked():
    run = _prompt_run(2, 3)  # every group all wrong ...
    run.groups[2][1, 0, 2] = 1  # ... but step 2's prompt 1 (length 21): mixed
    pool = prompt_pool([run], G=2)
    rng = np.random.default_rng(1)
    for _ in range(20):
        # one kept group at step 0: the window grows to step 2 to find it
        batch = prompt_batch(pool, 2, 3, 0, 1, True, rng)
        lengths = sorted(batch[:, 0, 0])
        assert 21 in lengths and len(set(lengths)) == 3
        assert kept_rollouts(batch[..., 2], True)[:, 0].sum() == 1
    # asking for two kept groups where one exists: it, and the unmixed fill the batch
    batch = prompt_batch(pool, 2, 3, 0, 2, True, rng)
    assert kept_rollouts(batch[..., 2], True)[:, 0].sum() == 1 and len(set(batch[:, 0, 0])) == 3


def test_the_prompts_draw_prices_distinct_prompts_where_the_groups_draw_repeats_them():
    # one fit run of B = 2 at one step: prompt lengths 0 and 1; 2 groups drawn
    run = _prompt_run(2, 1)
    law = CostLaw({"prefill_tokens": 1.0}, {"one": 0.0}, 0.0, dynamic_sampling=False)
    # distinct prompts: every batch holds both, one prefill of 4 rows padded to 1 token
    assert predict_setting(law, [run], 2, 2, 1, 64, 10, 0, "prompts") == pytest.approx(4.0)
    # with replacement, both rows of prompt 0 in some batches: fewer than 4 tokens there
    assert predict_setting(law, [run], 2, 2, 1, 64, 40, 0, "groups") < 4.0
    with pytest.raises(ValueError, match="draw must be one of"):
        drawn_features([run], 2, 2, 1, 64, draw="rows")
