"""The bad files of the bad-input corpus (tests/test_bad_inputs.py): built fresh in each
case's folder before it runs, so the case can check that nothing changed afterwards.

Placeholders in a case's arguments: ``{t}`` is that folder, ``{r}`` the repository root.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GSM8K = json.loads((REPO / "sim" / "data" / "gsm8k.json").read_text())


HZ_HEAD = "S,lr,seed,collapsed,t_collapse,M_collapse\n"
HZ_ONE_S = HZ_HEAD + "1,0.1,0,true,3,3\n1,0.01,0,false,,\n1,0.1,1,true,4,4\n1,0.01,1,false,,\n"
HZ_TWO = HZ_ONE_S + "4,0.1,0,true,2,1\n4,0.01,0,false,,\n4,0.1,1,true,2,1\n4,0.01,1,true,9,3\n"


def _calibration(**changes) -> dict:
    """gsm8k.json with ``changes`` (dotted keys; value ``...`` deletes the key)."""
    d = copy.deepcopy(GSM8K)
    for dotted, value in changes.items():
        *heads, last = dotted.split(".")
        node = d
        for h in heads:
            node = node[h]
        if value is ...:
            node.pop(last)
        else:
            node[last] = value
    return d


CALIBRATIONS = {
    "format": _calibration(format="other"),
    "version": _calibration(version=9),
    "mu_str": _calibration(**{"lengths.mu": "abc"}),
    "cap0": _calibration(**{"lengths.max_response_length": 0}),
    "sigma_neg": _calibration(**{"lengths.sigma_within": -0.1}),
    "lengths_list": _calibration(lengths=[1, 2]),
    "kind": _calibration(**{"lengths.kind": "gamma"}),
    "no_mu": _calibration(**{"lengths.mu": ...}),
    "cost_unknown": _calibration(**{"cost.bogus_s": 1.0}),
    "cost_str": _calibration(**{"cost.a_s": "fast"}),
    "cost_list": _calibration(cost=[1.0]),
    "prompt_neg": _calibration(prompt_tokens=-1),
    "prompt_frac": _calibration(prompt_tokens=1.5),
    "tau_low": _calibration(**{"defaults.tau": 0.5}),
    "prompts_str": _calibration(**{"defaults.prompts": "many"}),
    "target_high": _calibration(**{"defaults.target_reward": 2}),
    "workers0": _calibration(**{"engine.n_workers": 0}),
    "engine_list": _calibration(engine=[1]),
    "passrate_spec": _calibration(**{"pass_rate.spec": "uniform"}),
    "mt_turns0": _calibration(multi_turn={"turns": {"law": "fixed", "n": 0}}),
    "mt_probs": _calibration(multi_turn={"turns": {"law": "empirical", "values": [2, 3], "probs": [0.5, 0.7]}}),
    "mt_min": _calibration(multi_turn={"turns": {"law": "geometric", "mean": 3, "max": 4, "min": 0}}),
    "mt_nan": _calibration(multi_turn={"tool_latency": {"min_s": 0.1, "scale_s": "NaN"}}),
    "mt_slots0": _calibration(multi_turn={"sandboxes": 0}),
    "mt_timeout": _calibration(multi_turn={"tool_latency": {"min_s": 3.0}, "timeout_s": 1.0}),
    "empirical_str": _calibration(lengths={"kind": "empirical", "values": ["x"], "max_response_length": 8}),
}  # fmt: skip
"""name -> a calibration JSON with one bad field (written as ``cal_<name>.json``)."""


def build(t: Path) -> None:
    """Write every bad input file of the corpus under ``t``."""
    for name, d in CALIBRATIONS.items():
        (t / f"cal_{name}.json").write_text(json.dumps(d))
    (t / "cal_nan.json").write_text(
        json.dumps(GSM8K).replace('"mu": 5.520171857096468', '"mu": NaN')
    )
    (t / "cal_inf.json").write_text(
        json.dumps(GSM8K).replace('"sync_s": 1.0251700282096863', '"sync_s": Infinity')
    )
    (t / "not_json.json").write_text("{not json")
    (t / "list.json").write_text("[1, 2]")
    (t / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    (t / "notes.txt").write_text("my notes, not a calibration\n")
    (t / "a_file").write_text("a file where a folder is expected\n")
    (t / "cal_dir.json").mkdir()
    # output folders that belong to someone else
    other = t / "other_run"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"command": "stability"}))
    (other / "stability.csv").write_text("S,lr\n1,0.1\n")
    junk = t / "junk"
    junk.mkdir()
    (junk / "thesis.tex").write_text("\\begin{document}\n")
    (t / "empty").mkdir()
    # verl TensorBoard runs: a garbage event file, a folder without one
    tb = t / "tb_garbage"
    tb.mkdir()
    (tb / "events.out.tfevents.1.host").write_bytes(b"\x00\x01not a tfrecord" * 8)
    # per-sample files
    (t / "scores.jsonl").write_text('{"score": [1, 0]}\n{torn line\n')
    (t / "scores_nofield.jsonl").write_text('{"other": 1}\n')
    dup = '{"idx": 0, "score": [1, 0]}\n{"idx": 1, "score": [1, 1]}\n{"idx": 0, "score": [0, 0]}\n'
    (t / "scores_dup.jsonl").write_text(dup)
    (t / "groups.csv").write_text("step,prompt_id\n0,zero\n")
    # traces of a real run: torn, wrong columns
    run = t / "run_bad_trace"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"run_id": "x", "kind": "real-sync"}))
    (run / "rollouts.jsonl").write_text('{"step": 0, "prompt_id": "a"}\n')
    (run / "steps.jsonl").write_text('{"step": 0}\n')
    # studies for `report`
    for name, files in {
        "study_idle": {"config.json": '{"kind": "compare-idle"}', "idle_summary.csv": "a\n1\n",
                       "idle_summary.json": '{"summary": [{"prediction": "drawn"}]}'},
        "study_cfg": {"config.json": "{torn", "summary.csv": "a\n1\n"},
        "study_list": {"config.json": "[1]", "summary.csv": "a\n1\n"},
        "study_coll": {"collapse_scaling.csv": "a\n1\n", "collapse_summary.json": '{"held_out": 3}'},
        "study_none": {"notes.txt": "x"},
        "a/same": {"summary.csv": "a\n1\n"},
        # horizon law: one S; two grids of different step counts
        "hz_oneS": {"config.json": '{"steps": 10}', "stability.csv": HZ_ONE_S},
        "hz_T10": {"config.json": '{"steps": 10}', "stability.csv": HZ_TWO},
        "hz_T20": {"config.json": '{"steps": 20}', "stability.csv": HZ_TWO},
        "b/same": {"summary.csv": "a\n1\n"},
    }.items():  # fmt: skip
        d = t / name
        d.mkdir(parents=True)
        for f, text in files.items():
            (d / f).write_text(text)
    grid = t / "grid.csv"
    grid.write_text("S,lr\n1,0.1\n")
    # user trial: damaged parquet, a simulator's folder, an unfinished grid
    (t / "garbage.parquet").write_bytes(b"PAR1 not a parquet file")
    (t / "tokens_as_id.jsonl").write_text(
        "".join(
            f'{{"step": 0, "input": {30 + p % 2}, "output": {50 + p + j}}}\n'
            for p in range(4)
            for j in range(2)
        )
    )
    (t / "unclosed_quote.csv").write_text('idx,response_lengths\n"0,[3, 4]\n')
    (t / "latin1.jsonl").write_bytes(b'{"idx": 0, "response_lengths": [3, 4]}\n\xe9\xff\n')
    whole = (REPO / "tests" / "data" / "groups" / "real_sync" / "rollouts.parquet").read_bytes()
    (t / "cut.parquet").write_bytes(whole[:3000])
    sim_run = t / "sim_run"
    sim_run.mkdir()
    (sim_run / "config.json").write_text(json.dumps({"command": "sim", "scenario": "gsm8k"}))
    (sim_run / "summary.csv").write_text("controller\nstatic:4\n")
    cut_grid = t / "grid_cut"
    cut_grid.mkdir()
    (cut_grid / "config.json").write_text(json.dumps({"command": "sweep"}))
    header = {"grid": "0" * 64, "command": "sweep", "points": 4}
    point = {"index": 0, "point": {}, "status": "ok", "error": None, "attempts": 1, "rows": []}
    (cut_grid / "grid.jsonl").write_text(json.dumps(header) + "\n" + json.dumps(point) + "\n")
    # verl trainer configs (sim --verl-config, scenario from-verl)
    (t / "verl_torn.yaml").write_text("data:\n  train_batch_size: [1\n")
    (t / "verl_list.yaml").write_text("- data.train_batch_size: 8\n")
    (t / "verl_type.yaml").write_text("data:\n  train_batch_size: many\n")
    tp = "trainer: {nnodes: 1, n_gpus_per_node: 6}\nactor_rollout_ref.rollout.tensor_model_parallel_size: 4\n"
    (t / "verl_tp.yaml").write_text(tp)
    # per-sample logs people have: verl rollout dumps and recipe logs
    dump = t / "verl_dump_gap"  # verl trainer.rollout_data_dir with an empty step file
    dump.mkdir()
    for s in (1, 2):
        (dump / f"{s}.jsonl").write_text(
            "".join(
                f'{{"input": "q{p}", "output": "{"ab" * (j + 1)}", "score": 1.0, "step": {s}}}\n'
                for p in range(2)
                for j in range(2)
            )
        )
    (dump / "3.jsonl").write_text("")
    (t / "ids_reused.jsonl").write_text(
        '{"step": 0, "index": 0, "prompt": "2+2?", "response_length": 7}\n'
        '{"step": 0, "index": 0, "prompt": "2+2?", "response_length": 9}\n'
        '{"step": 1, "index": 0, "prompt": "3*5?", "response_length": 8}\n'
    )
    (t / "above_cap.jsonl").write_text(
        '{"step": 0, "uid": "a", "response_length": 300, "max_response_length": 512}\n'
        '{"step": 0, "uid": "a", "response_length": 513, "max_response_length": 512}\n'
    )
    (t / "neg_len.jsonl").write_text('{"step": 0, "uid": "a", "response_length": -4}\n')
    (t / "console.jsonl").write_text(
        "(main_task pid=1) step:1 - timing/gen:12.3 - response_length/mean:200\n"
    )
    tags = '"response_length/max": 40, "response_length/min": 2, "response_length/clip_ratio": 0'
    (t / "m_nan.jsonl").write_text(f'{{"step": 38, "response_length/mean": NaN, {tags}}}\n')
    (t / "m_gap.jsonl").write_text(f'{{"step": 38, "response_length/mean": 9, {tags}}}\n')
    (t / "m.txt").write_text("step:38 - response_length/mean:9\n")
    (t / "two_ids.jsonl").write_text(
        '{"step": 0, "uid": "a", "index": 7, "response_length": 5}\n'
        '{"step": 0, "uid": "b", "index": 7, "response_length": 9}\n'
    )
    # a new user's trial: numbers as texts, lengths beyond any model's context
    (t / "len_texts.jsonl").write_text(
        '{"step": 0, "uid": "a", "response_lengths": ["100", "x"]}\n'
    )
    for name, value in (("len_1e300", "1e300"), ("len_int_huge", "12345678901234567890"),
                        ("len_1e12", "1e12")):  # fmt: skip
        (t / f"{name}.jsonl").write_text(
            '{"step": 0, "uid": "a", "response_length": 7}\n'
            f'{{"step": 0, "uid": "a", "response_length": {value}}}\n'
        )
    (t / "mixed_len.jsonl").write_text(
        '{"step": 0, "uid": "a", "response": "a text"}\n{"step": 0, "uid": "a", "response": 40}\n'
    )
    (t / "cap_1e300.jsonl").write_text(
        '{"step": 0, "uid": "a", "response_length": 7, "max_response_length": 1e300}\n'
    )
