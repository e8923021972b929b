"""verl console logs: step lines into a step table; bad lines named."""

import pytest
from rolloutlab.calibration.readers.verl_console import read_console_log
from rolloutlab.calibration.readers.verl_tb import VerlLogError

PREFIX = "\x1b[2m\x1b[36m(main_task pid=7)\x1b[0m "


def _log(tmp_path, *lines):
    p = tmp_path / "run.log"
    p.write_text("".join(line + "\n" for line in lines))
    return p


def test_step_lines_become_rows_and_a_steps_lines_merge(tmp_path):
    p = _log(
        tmp_path,
        "config: {'actor': {'lr': 1e-6}}",
        PREFIX + "step:0 - test_score/openai/gsm8k:0.521",
        PREFIX + "step:0 - timing/gen:48.956 - response_length/mean:313.8 - actor/lr(1e-4):0.100",
        PREFIX + "step:1 - timing/gen:23.1 - response_length/mean:-0.5",
    )
    t = read_console_log(p)
    assert t["step"].to_list() == [0, 1]
    assert t["response_length/mean"].to_list() == [313.8, -0.5]
    assert t["test_score/openai/gsm8k"].to_list() == [0.521, None]
    assert t["actor/lr(1e-4)"].to_list() == [0.1, None]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("step:3 - timing/gen:fast", "line 1: field timing/gen: 'fast' is not a number"),
        ("step:3 - timing/gen", "line 1: field 'timing/gen' is not key:value"),
    ],
)
def test_a_bad_field_is_one_line_naming_file_line_and_field(tmp_path, line, message):
    p = _log(tmp_path, line)
    with pytest.raises(VerlLogError, match=message) as info:
        read_console_log(p)
    assert str(p) in str(info.value)


def test_a_metric_logged_twice_at_one_step_is_refused(tmp_path):
    p = _log(tmp_path, "step:2 - timing/gen:1.0", "step:2 - timing/gen:2.0")
    with pytest.raises(VerlLogError, match="line 2: field timing/gen of step 2 logged again"):
        read_console_log(p)


def test_a_log_without_step_lines_is_refused(tmp_path):
    with pytest.raises(VerlLogError, match="not a verl console log"):
        read_console_log(_log(tmp_path, "hello", "world"))
