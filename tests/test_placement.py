"""Placement on N GPUs (sim.scenario.placement): the split's arithmetic, the memory
check, and the learner and sync costs it sets."""

from __future__ import annotations

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.analysis.advise.search import Constraints, SearchSpace, search
from rolloutlab.sim.models.hardware import get_gpu, get_model
from rolloutlab.sim.models.learner_cost import TIMING_KEYS, Layout, learner_phases, weight_sync_s
from rolloutlab.sim.scenario.placement import apply_split, check_memory, parse_phases, parse_split
from rolloutlab.sim.scenario.scenario import load_scenario

from rolloutlab.cli import main

M, H100 = get_model("qwen2.5-7b"), get_gpu("h100")


@settings(max_examples=30, deadline=None)
@given(trainer=st.integers(8, 56), tp=st.sampled_from([1, 2, 4, 8]))
def test_a_split_sets_workers_learner_and_sync_from_the_rooflines(trainer, tp):
    rollout = (64 - trainer) // tp * tp
    if rollout < tp:
        return
    split = parse_split(rollout + trainer, f"{rollout}:{trainer}", tp)
    sc = apply_split(load_scenario("longcot"), split, M, H100)
    assert sc.engine.n_workers == rollout // tp
    T = 3e6
    want = sum(learner_phases(M, H100, Layout(trainer), T).values())
    assert sc.cost.learner_step_s(T) == pytest.approx(want, rel=1e-9)
    assert sc.cost.weight_sync_s() == pytest.approx(
        weight_sync_s(M.weight_bytes(), rollout // tp, 50e9)
    )


def test_more_trainer_gpus_train_faster_and_more_replicas_sync_slower():
    sc = load_scenario("longcot")
    a = apply_split(sc, parse_split(64, "48:16", 2), M, H100)
    b = apply_split(sc, parse_split(64, "32:32", 2), M, H100)
    assert b.cost.learner_step_s(4e6) < a.cost.learner_step_s(4e6)
    assert a.cost.weight_sync_s() > b.cost.weight_sync_s()
    bucketed = apply_split(sc, parse_split(64, "48:16", 2), M, H100, sync="bucketed")
    assert bucketed.cost.weight_sync_s() > a.cost.weight_sync_s()


@settings(max_examples=20, deadline=None)
@given(trainer=st.sampled_from([8, 16, 32, 64]), updates=st.integers(1, 8))
def test_learner_phases_chosen_sum_to_those_phases_of_the_roofline(trainer, updates):
    # verl fully-async with rollout log-probs and no KL runs only update_actor
    sc = load_scenario("longcot")
    split = parse_split(2 * trainer, f"{trainer}:{trainer}", 4)
    only = apply_split(sc, split, M, H100, phases=("timing_s/update_actor",), updates=updates)
    full = apply_split(sc, split, M, H100, updates=updates)
    T = 5e6
    phases = learner_phases(M, H100, Layout(trainer), T, updates=updates)
    assert only.cost.learner_step_s(T) == pytest.approx(phases["timing_s/update_actor"], rel=1e-9)
    want = phases["timing_s/update_actor"] + 2 * phases["timing_s/old_log_prob"]
    assert full.cost.learner_step_s(T) == pytest.approx(want, rel=1e-9)


def test_an_unknown_learner_phase_is_refused():
    with pytest.raises(ValueError, match="learner phases"):
        apply_split(
            load_scenario("longcot"), parse_split(16, "8:8", 2), M, H100, phases=("timing_s/x",)
        )


@settings(max_examples=40, deadline=None)
@given(
    chosen=st.lists(st.sampled_from(TIMING_KEYS[:3]), min_size=1, max_size=3, unique=True),
    prefixed=st.lists(st.booleans(), min_size=3, max_size=3),
)
def test_learner_phases_parse_to_the_timing_keys_named_in_verls_order(chosen, prefixed):
    text = ",".join(k if p else k.removeprefix("timing_s/") for k, p in zip(chosen, prefixed))
    got = parse_phases(text)
    assert set(got) == set(chosen)
    assert list(got) == [k for k in TIMING_KEYS[:3] if k in chosen]


@pytest.mark.parametrize(
    "text, words",
    [
        ("update_actor,critic", "unknown phase 'critic'"),
        ("timing_s/update_weights", "unknown phase"),
        ("ref,timing_s/ref", "given twice"),
        ("", "empty phase name"),
        ("ref,,update_actor", "empty phase name"),
    ],
)
def test_bad_learner_phases_are_refused_naming_them(text, words):
    with pytest.raises(ValueError, match=words):
        parse_phases(text)


def test_sim_charges_only_the_learner_phases_chosen(tmp_path):
    # verl fully-async with rollout log-probs: update_actor only, less than the three phases
    base = "sim --steps 2 --prompts 8 --controller static:4 --model qwen2.5-7b --gpu h100"
    base += " --tp 2 --engine fast --no-kv-cache --gpus 16 --split 8:8 --no-figure --out"
    train = {}
    for name, extra in (("all", []), ("actor", ["--learner-phases", "update_actor"])):
        res = CliRunner().invoke(main, [*base.split(), str(tmp_path / name), *extra])
        assert res.exit_code == 0, res.output
        train[name] = pl.read_parquet(tmp_path / name / "steps.parquet")["train_time"].to_list()
    # both learner costs are linear in the step's tokens T: recover T from the three-phase
    # time, then the update_actor time at that T must be what the run charged
    lay = Layout(parse_split(16, "8:8", 2).trainer)
    at = [learner_phases(M, H100, lay, t) for t in (0.0, 1e6)]
    actor = [p["timing_s/update_actor"] for p in at]
    every = [sum(p[k] for k in TIMING_KEYS[:3]) for p in at]
    for a, b in zip(train["actor"], train["all"], strict=True):
        tokens = (b - every[0]) / (every[1] - every[0]) * 1e6
        assert tokens > 0
        assert a == pytest.approx(actor[0] + (actor[1] - actor[0]) * tokens / 1e6, rel=1e-6)
        assert a < b


def test_colocated_uses_every_gpu_for_both():
    split = parse_split(16, None, 2, colocated=True)
    assert (split.replicas, split.trainer) == (8, 16)
    with pytest.raises(ValueError, match="for --placement separate"):
        parse_split(16, "8:8", 2, colocated=True)


@pytest.mark.parametrize(
    "gpus, spec, tp, words",
    [
        (64, "48:15", 2, "adds up to 63 GPUs, not --gpus 64"),
        (64, "50:14", 4, "--tp 4 does not divide the 50 rollout GPUs"),
        (64, "48-16", 2, "expected R:T"),
        (64, None, 2, "needs --split R:T"),
        (64, "64:0", 2, "must be >= 1"),
    ],
)
def test_a_bad_split_is_refused_naming_it(gpus, spec, tp, words):
    with pytest.raises(ValueError, match=words):
        parse_split(gpus, spec, tp)


def test_a_model_too_large_says_by_how_much():
    with pytest.raises(
        ValueError, match=r"training state on the trainer need 121\.\d GB .* 49\.\d GB short"
    ):
        check_memory(parse_split(64, "63:1", 1), M, H100)
    check_memory(parse_split(64, "48:16", 2), M, H100)  # fits: no error


def test_advise_searches_the_split_with_the_other_settings():
    space = SearchSpace(
        controller=("static:8",),
        prompts=(1, 2),
        workers=(1,),
        max_num_seqs=(8,),
        pipeline=("sync",),
        lr=(1.0,),
        split=("56:8", "48:16", "32:32"),
    )
    assert space.keys[-1] == "split" and space.size() == 6

    def priced(settings):  # fastest at 48:16, prompts 1
        t = {"56:8": 30.0, "48:16": 10.0, "32:32": 20.0}
        return [
            {
                "time_to_target_s": t[s["split"]] + s["prompts"],
                "time_per_step_s": 1.0,
                "wall_clock_s": 100.0,
                "straggler_rate": 0.0,
                "collapse_margin": 2.0,
            }
            for s in settings
        ]

    table = search(space, Constraints(), priced, n_trials=30, batch=3, seed=0)
    best = table.filter("best").row(0, named=True)
    assert (best["split"], best["prompts"]) == ("48:16", 1)


def test_advise_refuses_a_bad_split_with_one_line(tmp_path):
    base = [
        "advise",
        "--model",
        "qwen2.5-7b",
        "--gpu",
        "h100",
        "--tp",
        "2",
        "--out",
        str(tmp_path / "o"),
    ]
    for extra, words in (
        (["--gpus", "64", "--split", "48:15"], "adds up to 63 GPUs"),
        (["--split", "48:16"], "--gpus and --split go together"),
        (["--gpus", "64", "--tp", "1", "--split", "63:1"], "GB short"),
    ):
        res = CliRunner().invoke(main, base + extra)
        assert res.exit_code == 2, res.output
        assert words in res.output and "Traceback" not in res.output
        assert not (tmp_path / "o").exists()


def test_dp_imbalance_scales_only_the_per_token_learner_term():
    from rolloutlab.sim.models.dp_imbalance import Imbalance, imbalance_factor

    sc = load_scenario("longcot")
    split = parse_split(64, "32:32", 4)
    plain = apply_split(sc, split, M, H100)
    skew = apply_split(sc, split, M, H100, imbalance=Imbalance(512, 16, "contiguous", sp=4))
    f = imbalance_factor(sc.lengths, 512, 8, 16, sc.prompt_tokens, "contiguous")
    assert f > 1.0
    assert skew.cost.learner_const_s == pytest.approx(plain.cost.learner_const_s, rel=1e-12)
    assert skew.cost.learner_s_per_token == pytest.approx(f * plain.cost.learner_s_per_token)
    with pytest.raises(ValueError, match="sp 3 does not divide"):
        apply_split(sc, split, M, H100, imbalance=Imbalance(512, 16, sp=3))
