"""calibration.readers.grouped: every supported layout, caps as censoring, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.calibration.readers.grouped import FieldNames, GroupedDataError, read_grouped

DATA = Path(__file__).parent / "data" / "groups"
GROUPS = {("a", 0): [5, 7, 9], ("b", 0): [20, 2, 30], ("a", 1): [6, 8, 10], ("b", 1): [3, 4, 72]}


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def per_prompt_records(length_key="response_lengths", step_key="global_step"):
    return [
        {step_key: s, "uid": p, length_key: v, "reward": [1, 0, 1]} for (p, s), v in GROUPS.items()
    ]


def per_sample_records():
    return [
        {"step": s, "prompt_id": p, "sample_idx": j, "response_length": x, "score": j % 2}
        for (p, s), v in GROUPS.items()
        for j, x in enumerate(v)
    ]


def as_dict(trace) -> dict:
    """(prompt, step) -> lengths, whatever the layout."""
    out = {}
    for (p, s), g in trace.samples.group_by("prompt", "step", maintain_order=True):
        out[(p, s)] = g.sort("sample_idx")["length"].to_list()
    return out


def test_per_prompt_jsonl_with_common_spellings(tmp_path):
    t = read_grouped([write_jsonl(tmp_path / "g.jsonl", per_prompt_records())])
    assert as_dict(t) == GROUPS
    assert t.steps() == [0, 1] and t.group_size() == 3 and t.has_rewards()
    assert t.length_unit == "numbers of field 'response_lengths', unit as given"
    assert t.matrix(1).tolist() == [[6, 8, 10], [3, 4, 72]]


def test_per_sample_jsonl_csv_and_parquet_agree(tmp_path):
    recs = per_sample_records()
    jl = write_jsonl(tmp_path / "s.jsonl", recs)
    df = pl.DataFrame(recs)
    df.write_csv(tmp_path / "s.csv")
    df.write_parquet(tmp_path / "s.parquet")
    for p in (jl, tmp_path / "s.csv", tmp_path / "s.parquet"):
        t = read_grouped([p])
        assert as_dict(t) == GROUPS, p
        assert t.samples["reward"].to_list()[:3] == [0.0, 1.0, 0.0]


def test_per_prompt_csv_list_cells_and_parquet_lists(tmp_path):
    recs = per_prompt_records(length_key="lengths", step_key="step")
    pl.DataFrame(recs).write_parquet(tmp_path / "p.parquet")
    rows = [
        {**r, "lengths": json.dumps(r["lengths"]), "reward": json.dumps(r["reward"])} for r in recs
    ]
    pl.DataFrame(rows).write_csv(tmp_path / "p.csv")
    for p in (tmp_path / "p.parquet", tmp_path / "p.csv"):
        assert as_dict(read_grouped([p])) == GROUPS


def test_configured_field_names(tmp_path):
    recs = [{"t": s, "q": p, "L": v} for (p, s), v in GROUPS.items()]
    names = FieldNames(step="t", prompt="q", lengths="L")
    assert as_dict(read_grouped([write_jsonl(tmp_path / "c.jsonl", recs)], names)) == GROUPS


def test_text_responses_are_characters_without_a_tokenizer(tmp_path):
    recs = [
        {"idx": 0, "response": ["abc", "a b c d e", ""]},
        {"idx": 1, "response": ["xy", "z", "wv"]},
    ]
    t = read_grouped([write_jsonl(tmp_path / "t.jsonl", recs)])
    assert t.samples["length"].to_list() == [3, 9, 1, 2, 1, 2]  # empty text counts 1
    assert t.length_unit == "characters (no tokenizer given)"
    t = read_grouped([tmp_path / "t.jsonl"], tokenizer=str(tmp_path / "no-such-tokenizer"))
    assert t.samples["length"].to_list() == [3, 9, 1, 2, 1, 2]
    assert "not found locally" in t.length_unit


def test_text_responses_with_a_local_tokenizer(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    vocab = {"[UNK]": 0, "a": 1, "b": 2}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(
        tmp_path / "tok"
    )
    recs = [{"idx": 0, "response": ["a b", "a b c d e"]}, {"idx": 1, "response": ["a", "xyz w"]}]
    t = read_grouped([write_jsonl(tmp_path / "t.jsonl", recs)], tokenizer=str(tmp_path / "tok"))
    assert t.samples["length"].to_list() == [2, 5, 1, 2]  # whitespace words
    assert t.length_unit.startswith("tokens (tokenizer ")


def test_project_rollouts_parquet_is_read_directly():
    t = read_grouped([DATA / "real_sync"])  # a run folder: its rollouts.parquet
    raw = pl.read_parquet(DATA / "real_sync" / "rollouts.parquet")
    assert t.samples.height == raw.height == 5120
    assert t.group_size() == 8 and len(t.steps()) == 40
    assert t.samples["censored"].sum() == (raw["finish_reason"] == "length").sum() == 5
    assert t.samples.filter(pl.col("censored"))["cap"].to_list() == [72] * 5
    assert t.length_unit == "tokens"


def test_math_fixture_with_rewards():
    t = read_grouped([DATA / "math_cot_100_lengths.jsonl"], FieldNames(lengths="response_chars"))
    assert t.steps() == [0] and t.group_size() == 8 and t.has_rewards()
    assert t.samples.height == 800
    assert np.stack(t.groups("reward")[0]).shape == (100, 8)


def test_caps_and_finish_reasons_censor(tmp_path):
    recs = [
        # a per-prompt max_model_len caps prompt + response: response cap = 100 - 40 = 60
        {"step": 0, "uid": 0, "lengths": [60, 10], "max_model_len": 100, "prompt_tokens": 40},
        {"step": 0, "uid": 1, "lengths": [33, 12], "finish_reason": ["length", "stop"]},
    ]
    t = read_grouped([write_jsonl(tmp_path / "cap.jsonl", recs)])
    assert t.samples["censored"].to_list() == [True, False, True, False]
    assert t.samples["cap"].to_list() == [60, 60, 33, None]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (-3, "not an integer >= 1"),
        (2.5, "not an integer >= 1"),
        (float("nan"), "not an integer"),
        (0, ">= 1"),
    ],
)
def test_bad_lengths_name_file_line_and_field(tmp_path, value, words):
    recs = per_prompt_records()
    recs[2]["response_lengths"] = [4, value, 5]
    p = write_jsonl(tmp_path / "bad.jsonl", recs)
    with pytest.raises(
        GroupedDataError, match=rf"bad.jsonl: line 3: field 'response_lengths'.*{words}"
    ):
        read_grouped([p])


def test_no_length_field_and_ragged_groups(tmp_path):
    p = write_jsonl(tmp_path / "nolen.jsonl", [{"step": 0, "uid": 1, "text_len": [3]}])
    with pytest.raises(GroupedDataError, match=r"nolen.jsonl: line 1: no lengths field"):
        read_grouped([p])
    recs = per_prompt_records()
    recs[3]["response_lengths"] = [1, 2]
    recs[3]["reward"] = [1, 0]
    t = read_grouped([write_jsonl(tmp_path / "rag.jsonl", recs)])
    with pytest.raises(
        GroupedDataError, match=r"rag.jsonl: line 4: .*step 1 prompt 'b' has 2 samples"
    ):
        t.group_size()


@settings(max_examples=20, deadline=None)
@given(
    groups=st.lists(
        st.lists(st.integers(1, 10**5), min_size=1, max_size=5), min_size=1, max_size=6
    ),
    steps=st.integers(1, 3),
)
def test_per_prompt_and_per_sample_layouts_read_the_same_groups(tmp_path_factory, groups, steps):
    tmp = tmp_path_factory.mktemp("rt")
    per_prompt = [
        {"step": t, "uid": i, "lengths": g} for t in range(steps) for i, g in enumerate(groups)
    ]
    per_sample = [
        {"step": r["step"], "prompt_id": r["uid"], "response_length": x}
        for r in per_prompt
        for x in r["lengths"]
    ]
    pl.DataFrame(per_sample).write_parquet(tmp / "s.parquet")
    a = read_grouped([write_jsonl(tmp / "p.jsonl", per_prompt)])
    b = read_grouped([tmp / "s.parquet"])
    assert as_dict(a) == as_dict(b)
    assert [g.tolist() for g in a.groups()[0]] == groups  # prompts in file order


def test_per_sample_records_without_index_are_numbered_in_file_order(tmp_path):
    recs = [{"step": 0, "prompt_id": p, "response_length": x} for p, x in [(1, 5), (2, 6), (1, 7)]]
    t = read_grouped([write_jsonl(tmp_path / "n.jsonl", recs)])
    assert t.samples.select("prompt", "sample_idx", "length").rows() == [
        ("1", 0, 5),
        ("2", 0, 6),
        ("1", 1, 7),
    ]


def test_verl_rollout_dump_per_step_files(tmp_path):
    # verl's _dump_generations: {step}.jsonl, one record per sample, prompt and response text
    files = []
    for step in (1, 2):
        recs = [
            {"input": q, "output": "x" * (10 * step + j + k), "score": float(j % 2), "step": step}
            for k, q in enumerate(["What is 2+2?", "Name a prime."])
            for j in range(3)
        ]
        files.append(write_jsonl(tmp_path / f"{step}.jsonl", recs))
    t = read_grouped(files)
    assert t.steps() == [1, 2] and t.group_size() == 3 and t.has_rewards()
    assert t.matrix(2).tolist() == [[20, 21, 22], [21, 22, 23]]
    assert t.samples["prompt_tokens"].null_count() == 12  # prompt text, no tokenizer
    assert t.length_unit == "characters (no tokenizer given)"


def test_schema_v2_rollouts_carry_rewards(tmp_path):
    from rolloutlab.sim.trace import schema as sim_trace

    df = sim_trace.read(DATA / "real_sync" / "rollouts.parquet", "rollouts")
    df = df.with_columns(
        (pl.col("response_tokens") % 2).cast(pl.Float64).alias("reward"),
        (pl.col("response_tokens") % 2 == 1).alias("correct"),
    )
    (tmp_path / "run").mkdir()
    sim_trace.write_parquet(df, tmp_path / "run" / "rollouts.parquet", "rollouts")
    t = read_grouped([tmp_path / "run"])
    assert t.has_rewards()
    assert t.samples["reward"].to_list() == (df["response_tokens"] % 2).cast(float).to_list()
    assert not read_grouped([DATA / "real_sync"]).has_rewards()  # schema v1: no rewards


def _samples(prompt_value, n_prompts=6, G=4, steps=2, **extra) -> list[dict]:
    """One record per sample; prompt p of a step has the prompt field ``prompt_value(p)``."""
    return [
        {"step": t, "input": prompt_value(p), "output": 50 + 10 * p + j, **extra}
        for t in range(steps)
        for p in range(n_prompts)
        for j in range(G)
    ]


def test_a_token_count_is_never_taken_for_the_prompt_id(tmp_path):
    # 'input' holds the prompt's length: prompts of equal length must not merge into one group
    path = write_jsonl(tmp_path / "tok.jsonl", _samples(lambda p: 30 + p % 2))
    with pytest.raises(GroupedDataError, match="'input' holds numbers .* --prompt-field"):
        read_grouped([path])


def test_a_token_count_beside_an_id_field_reads_the_groups_by_the_id(tmp_path):
    recs = [dict(r, question=f"q{r['step']}-{r['output'] // 10}") for r in _samples(lambda p: 30)]
    trace = read_grouped([write_jsonl(tmp_path / "q.jsonl", recs)])
    assert trace.samples["prompt"].n_unique() == 12 and set(trace.samples["prompt_tokens"]) == {30}


def test_prompt_text_in_input_is_the_prompt_identity(tmp_path):
    path = write_jsonl(tmp_path / "text.jsonl", _samples(lambda p: f"solve problem {p}"))
    trace = read_grouped([path])
    assert trace.samples.group_by("step", "prompt").len()["len"].to_list() == [4] * 12


def test_a_numeric_field_named_as_the_prompt_is_the_users_choice(tmp_path):
    path = write_jsonl(tmp_path / "tok.jsonl", _samples(lambda p: 30 + p))
    trace = read_grouped([path], FieldNames(prompt="input"))
    assert trace.samples["prompt"].n_unique() == 6


def test_unequal_group_sizes_are_read_and_reported(tmp_path):
    recs = [
        {"step": t, "uid": f"{t}-{p}", "response_length": 50 + p + j}
        for t in range(2)
        for p in range(4)
        for j in range(4 if p % 2 else 3)  # two prompts of each step lost a sample
    ]
    trace = read_grouped([write_jsonl(tmp_path / "uneven.jsonl", recs)])
    assert trace.samples.height == 2 * (3 + 4 + 3 + 4)
    assert trace.group_sizes() == "group sizes 3-4: 4 of 8 groups smaller than their step's largest"
    even = read_grouped(
        [write_jsonl(tmp_path / "even.jsonl", [r for r in recs if r["uid"][-1] in "13"])]
    )
    assert even.group_sizes() is None
