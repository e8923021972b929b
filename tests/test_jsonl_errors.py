"""A JSONL input that is not one JSON object per line is refused in one line naming the
file and line and saying what JSONL is; a pretty-printed JSON document is called one."""

from __future__ import annotations

import json

import pytest
from rolloutlab.calibration.readers.record_files import GroupedDataError, records
from rolloutlab.sim import trace
from rolloutlab.sim.models.passrate import parse_pass_rate

ROWS = [{"prompt_id": 0, "pass_rate": 0.5}, {"prompt_id": 1, "pass_rate": 0.25}]


def _readers():
    return [
        (lambda p: records(p), GroupedDataError),
        (lambda p: parse_pass_rate(str(p)), ValueError),
        (lambda p: trace.read(p, "rollouts"), trace.TraceError),
    ]


@pytest.mark.parametrize("reader,error", _readers(), ids=["records", "pass-rate", "trace"])
@pytest.mark.parametrize(
    "doc,fix", [(ROWS, "jq -c '.[]'"), (ROWS[0], "jq -c .")], ids=["array", "object"]
)
def test_a_pretty_printed_document_is_named_as_one(tmp_path, reader, error, doc, fix):
    path = tmp_path / "scores.jsonl"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    with pytest.raises(error) as info:
        reader(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: line 1: not valid JSON (")
    assert "the file is one JSON document" in msg
    assert "one JSON object per line" in msg and f"`{fix} {path}`" in msg
    assert "\n" not in msg


@pytest.mark.parametrize("reader,error", _readers(), ids=["records", "pass-rate", "trace"])
def test_a_torn_line_names_its_line_and_the_format(tmp_path, reader, error):
    path = tmp_path / "scores.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n\n" + '{"prompt_id": 1, "pass_rate"\n')
    with pytest.raises(error) as info:
        reader(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: line 3: not valid JSON (")
    assert msg.endswith("JSONL is expected, one JSON object per line")
    assert "JSON document" not in msg
