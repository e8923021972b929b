"""Per-sample logs as other tools write them: verl's rollout dump folder
(``trainer.rollout_data_dir``, ``{step}.jsonl`` with input/output/score/step and the reward's
extra infos), a recipe's per-step JSONL (uid, index, response length, reward, finish
reason), TRL/OpenRLHF-style prompt/completion records; prompt identity from an id field,
ids checked against the prompt text, lengths checked against the stated cap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from rolloutlab.calibration.readers.grouped import FieldNames, GroupedDataError, read_grouped

from rolloutlab.cli import main


def _jsonl(path: Path, recs) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def _verl_dump(folder: Path, steps=(1, 2, 3), B=2, G=3) -> Path:
    """A dump folder as verl writes it: one file per step, one line per sample, the
    prompt's decoded text in ``input``, the response text in ``output``."""
    folder.mkdir()
    for s in steps:
        recs = [
            {
                "input": f"user: what is {p} + {s}?",
                "output": "x" * (10 * (p + 1) + j + s),
                "gts": str(p + s),
                "score": float(j % 2),
                "step": s,
                "acc": bool(j % 2),
            }
            for p in range(B)
            for j in range(G)
        ]
        _jsonl(folder / f"{s}.jsonl", recs)
    return folder


def test_verl_dump_folder_is_one_run_grouped_by_prompt_text(tmp_path):
    t = read_grouped([_verl_dump(tmp_path / "dump")])
    assert t.steps() == [1, 2, 3] and t.typical_group_size() == 3 and t.group_sizes() is None
    step2 = t.groups("length")[1]
    assert sorted(g.tolist() for g in step2) == [[12, 13, 14], [22, 23, 24]]  # characters
    assert t.length_unit == "characters (no tokenizer given)"
    assert t.samples["reward"].to_list()[:3] == [0.0, 1.0, 0.0]
    assert set(t.samples["source"].str.extract(r"(\d+\.jsonl)$").to_list()) == {
        "1.jsonl",
        "2.jsonl",
        "3.jsonl",
    }


def test_verl_dump_file_of_another_step_is_refused(tmp_path):
    d = _verl_dump(tmp_path / "dump")
    (d / "4.jsonl").write_text((d / "3.jsonl").read_text())
    with pytest.raises(
        GroupedDataError, match=r"4.jsonl: line 1: field 'step': step 3 in the dump file of step 4"
    ):
        read_grouped([d])


def test_validate_and_calibrate_read_a_dump_folder(tmp_path):
    d = _verl_dump(tmp_path / "dump", steps=range(1, 7), B=3, G=4)
    r = CliRunner().invoke(
        main,
        ["compare", "groups", str(d), "--fit-steps", "3", "--tau", "1.5", "--draws", "5",
         "--reps", "5", "--length-model", "empirical", "--out", str(tmp_path / "v")],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["calibrate", "groups", str(d), "--out", str(tmp_path / "c.json")])
    assert r.exit_code == 0, r.output
    assert "72 samples" in r.output


def _recipe(path: Path, steps=2, B=3, G=4, cap=64) -> Path:
    """A recipe's per-step log: one line per sample, uid and dataset index, the
    response length in tokens, reward and finish reason; the prompt's token count in
    ``prompt_length``."""
    recs = []
    for s in range(steps):
        for p in range(B):
            for j in range(G):
                n = min(5 + 7 * p + 3 * j + s, cap)
                recs.append(
                    {"step": s, "uid": f"u{s}-{p}", "index": 100 + p, "prompt_length": 30,
                     "response_length": n, "reward": float(j == 0),
                     "finish_reason": "length" if n == cap else "stop"}
                )  # fmt: skip
    return _jsonl(path, recs)


def test_recipe_log_groups_by_uid_and_censors_at_the_cap(tmp_path):
    t = read_grouped([_recipe(tmp_path / "r.jsonl", cap=20)])
    assert t.typical_group_size() == 4 and len(t.groups()[0]) == 3
    cens = t.samples.filter(t.samples["censored"])
    # 5 + 7p + 3j + s >= 20: p = 2, j >= 1 (and j = 0 at s = 1); p = 1, j = 3: 4 + 3 + 2
    assert cens["length"].to_list() == [20] * cens.height and cens.height == 9
    assert set(t.samples["prompt"].str.slice(0, 1)) == {"u"}  # uid, not the length field


def test_prompt_field_names_the_id(tmp_path):
    t = read_grouped([_recipe(tmp_path / "r.jsonl")], FieldNames(prompt="index"))
    assert sorted(set(t.samples["prompt"])) == ["100", "101", "102"]


def test_trl_style_prompt_completion_records(tmp_path):
    recs = [
        {"step": s, "prompt": f"Solve {p}", "completion": "y" * (5 + p + j), "reward": 0.5}
        for s in range(2)
        for p in range(3)
        for j in range(2)
    ]
    t = read_grouped([_jsonl(tmp_path / "trl.jsonl", recs)])
    assert t.typical_group_size() == 2
    assert sorted(g.tolist() for g in t.groups()[0]) == [[5, 6], [6, 7], [7, 8]]


def test_dynamic_sampling_regeneration_reads_unequal_groups(tmp_path):
    """A prompt regenerated in a second round: its samples join its group (one id)."""
    recs = [{"step": 0, "uid": p, "response_length": 5 + j} for p in range(3) for j in range(4)]
    recs += [{"step": 0, "uid": 1, "response_length": 9 + j} for j in range(2)]
    t = read_grouped([_jsonl(tmp_path / "ds.jsonl", recs)])
    assert sorted(len(g) for g in t.groups()[0]) == [4, 4, 6]
    assert t.group_sizes() == "group sizes 4-6: 2 of 3 groups smaller than their step's largest"


def test_an_id_reused_for_another_prompt_is_refused(tmp_path):
    recs = [
        {"step": 0, "index": 0, "question": "2+2?", "response_length": 7},
        {"step": 1, "index": 1, "question": "2+2?", "response_length": 9},
        {"step": 1, "index": 0, "question": "3*5?", "response_length": 8},
    ]
    with pytest.raises(
        GroupedDataError,
        match=r"ids.jsonl: line 3: field 'index': id '0' names another prompt \(field "
        r"'question'\) at step 1 than at step 0 \(.*ids.jsonl: line 1\)",
    ):
        read_grouped([_jsonl(tmp_path / "ids.jsonl", recs)])
    # the same id for the same text over steps is a dataset index: accepted
    recs[2]["question"] = "2+2?"
    recs[1]["index"] = 0
    assert read_grouped([_jsonl(tmp_path / "ok.jsonl", recs)]).steps() == [0, 1]


def test_a_length_above_the_cap_is_refused_but_a_character_count_is_not(tmp_path):
    recs = [{"step": 0, "uid": 1, "response_length": 70, "max_response_length": 64}]
    with pytest.raises(
        GroupedDataError,
        match=r"line 1: field 'response_length': length 70 above the response cap 64",
    ):
        read_grouped([_jsonl(tmp_path / "a.jsonl", recs)])
    recs = [{"step": 0, "uid": 1, "response": "z" * 70, "max_response_length": 64}]
    t = read_grouped([_jsonl(tmp_path / "b.jsonl", recs)])  # characters against a token cap
    assert t.samples["length"].to_list() == [64]
    mml = [{"step": 0, "uid": 1, "response_length": 40, "prompt_tokens": 30, "max_model_len": 64}]
    with pytest.raises(
        GroupedDataError, match=r"length 40 above the response cap 34 \(field 'max_model_len'\)"
    ):
        read_grouped([_jsonl(tmp_path / "c.jsonl", mml)])


def test_two_id_fields_that_group_otherwise_are_refused(tmp_path):
    """Dataset index 7 sampled in two rounds of one step: ``uid`` keeps two groups,
    ``index`` merges them; which is meant is the user's call."""
    recs = [{"step": 0, "uid": "a", "index": 7, "response_length": 5 + j} for j in range(2)]
    recs += [{"step": 0, "uid": "b", "index": 7, "response_length": 9 + j} for j in range(2)]
    with pytest.raises(
        GroupedDataError,
        match=r"two.jsonl: line 3: field 'index': groups the samples of step 0 otherwise than "
        r"field 'uid' \(uid 'b', index 7\); name the prompt's id with --prompt-field",
    ):
        read_grouped([_jsonl(tmp_path / "two.jsonl", recs)])
    merged = read_grouped([tmp_path / "two.jsonl"], FieldNames(prompt="index"))
    assert [len(g) for g in merged.groups()[0]] == [4]
    assert [
        len(g) for g in read_grouped([tmp_path / "two.jsonl"], FieldNames(prompt="uid")).groups()[0]
    ] == [2, 2]
