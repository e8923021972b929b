"""Group-per-line length logs (packed_lengths_step_N.jsonl) read as written."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.calibration.readers.grouped import GroupedDataError, read_grouped

FIXTURE = "tests/data/packed_lengths"


def _write(folder, step, records):
    path = folder / f"packed_lengths_step_{step}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _group(local, output, dp=0, tp=0, **extra):
    return {
        "dp_rank": dp,
        "tp_rank": tp,
        "local_index": local,
        "input": 50,
        "output": output,
        "n_sampling": len(output),
        "validate": False,
    } | extra


def test_folder_reads_every_step_without_prompt_field():
    trace = read_grouped([FIXTURE])
    assert trace.steps() == [1, 2, 3]
    assert trace.group_size() == 4
    # 2 data-parallel ranks x 4 prompts per step; tp_rank 1 repeats and validation lines drop
    assert trace.samples.height == 3 * 8 * 4
    first = trace.samples.filter((trace.samples["step"] == 1) & (trace.samples["prompt"] == "0:0"))
    assert first["length"].to_list() == [159, 71, 82, 132]  # line 1 of the step-1 file
    assert first["prompt_tokens"].to_list() == [134] * 4


def test_one_file_is_one_step():
    trace = read_grouped([f"{FIXTURE}/packed_lengths_step_2.jsonl"])
    assert trace.steps() == [2]
    assert trace.samples.height == 8 * 4


def test_local_index_repeats_across_data_parallel_ranks(tmp_path):
    _write(tmp_path, 0, [_group(0, [3, 4], dp=0), _group(0, [9, 9], dp=1)])
    groups = read_grouped([tmp_path]).groups()
    assert sorted(g.tolist() for g in groups[0]) == [[3, 4], [9, 9]]


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({"local_index": 0, "input": 5}, "'output'"),
        (_group(0, []), "'output'"),
        (_group(0, [3, 0]), "'output'"),
        (_group(0, [3, 2.5]), "'output'"),
        (_group(0, ["abc"]), "'output'"),
        ({"input": 5, "output": [3]}, "'local_index'"),
        (_group(0, [3], input="long"), "'input'"),
        (_group(0, [3], n_sampling=2), "'n_sampling'"),
        (_group(0, [3], step=7), "'step'"),
        (_group(-1, [3]), "'local_index'"),
    ],
)
def test_malformed_record_is_one_line_naming_file_line_and_field(tmp_path, record, field):
    path = _write(tmp_path, 1, [_group(5, [4, 4]), record])
    with pytest.raises(GroupedDataError) as err:
        read_grouped([tmp_path])
    msg = str(err.value)
    assert "\n" not in msg
    assert f"{path}: line 2: field {field}" in msg


def test_a_group_logged_twice_by_one_worker_is_refused(tmp_path):
    _write(tmp_path, 0, [_group(1, [3, 4]), _group(1, [3, 4])])
    with pytest.raises(GroupedDataError, match=r"line 2: field 'local_index'.*repeats line 1"):
        read_grouped([tmp_path])


def test_tensor_parallel_workers_disagreeing_is_refused(tmp_path):
    _write(tmp_path, 0, [_group(1, [3, 4], tp=0), _group(1, [3, 5], tp=1)])
    with pytest.raises(GroupedDataError, match="with other lengths"):
        read_grouped([tmp_path])


def test_only_validation_lines_is_refused(tmp_path):
    _write(tmp_path, 0, [_group(0, [3]) | {"validate": True}])
    with pytest.raises(GroupedDataError, match="all 1 lines are validation rollouts"):
        read_grouped([tmp_path])


lengths = st.lists(st.integers(1, 5000), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), lengths), min_size=1, max_size=8, unique_by=lambda x: x[0]
    )
)
def test_written_groups_are_read_back_exactly(tmp_path_factory, groups):
    folder = tmp_path_factory.mktemp("packed")
    recs = []
    for local, out in groups:  # each group logged by both tensor-parallel workers
        recs += [_group(local, out, tp=0), _group(local, out, tp=1)]
    _write(folder, 4, recs)
    trace = read_grouped([folder])
    got = {
        p: g["length"].to_list()
        for (p,), g in trace.samples.group_by("prompt", maintain_order=True)
    }
    assert got == {f"0:{local}": out for local, out in groups}
