"""The shared option types (rolloutlab/commands/options/types.py) and output-folder ownership
(``claimed``): what they accept and refuse, and that a failed command leaves no folder."""

from __future__ import annotations

import math

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rolloutlab.commands.options.common import BadInput, RunFailed, claimed
from rolloutlab.commands.options.types import POSITIVE, PROBABILITY, CommaList, finite


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_finite_accepts_exactly_the_finite_floats_in_range(x):
    t = finite(0.0, 1.0)
    if math.isfinite(x) and 0.0 <= x <= 1.0:
        assert t.convert(repr(x), None, None) == x
    else:
        with pytest.raises(click.BadParameter):
            t.convert(repr(x), None, None)


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "NaN", "1e999", "x", "0", "-1"])
def test_positive_refuses(text):
    with pytest.raises(click.BadParameter):
        POSITIVE.convert(text, None, None)


def test_probability_bounds_are_closed():
    assert PROBABILITY.convert("0", None, None) == 0.0
    assert PROBABILITY.convert("1", None, None) == 1.0


@given(st.lists(st.integers(0, 50), min_size=1, max_size=8))
def test_comma_list_keeps_order_and_refuses_repeats(items):
    t = CommaList(click.IntRange(min=0))
    text = ",".join(map(str, items))
    if len(set(items)) == len(items):
        assert t.convert(text, None, None) == items
    else:
        with pytest.raises(click.BadParameter, match="repeated item"):
            t.convert(text, None, None)


def test_comma_list_names_the_bad_item_and_refuses_empty():
    t = CommaList(POSITIVE)
    with pytest.raises(click.BadParameter, match="item 'nan'"):
        t.convert("0.1,nan", None, None)
    with pytest.raises(click.BadParameter, match="comma-separated"):
        t.convert(" , ", None, None)
    assert CommaList(POSITIVE, unique=False).convert("1,1", None, None) == [1.0, 1.0]


def test_claimed_removes_the_folders_it_created_when_the_body_fails(tmp_path):
    with pytest.raises(ValueError), claimed(tmp_path / "a" / "b", "sim") as out:
        (out / "half.csv").write_text("x")
        raise ValueError("boom")
    assert list(tmp_path.iterdir()) == []


def test_claimed_keeps_a_folder_that_existed(tmp_path):
    (tmp_path / "o").mkdir()
    with pytest.raises(KeyboardInterrupt), claimed(tmp_path / "o", "sim"):
        raise KeyboardInterrupt
    assert (tmp_path / "o").is_dir()


def test_claimed_turns_a_write_error_into_one_line_exit_1(tmp_path):
    with (
        pytest.raises(RunFailed, match="cannot write the output"),
        claimed(tmp_path / "o", "sim") as out,
    ):
        (out / "missing" / "x.csv").write_text("x")
    assert not (tmp_path / "o").exists()


def test_claimed_refuses_another_commands_folder(tmp_path):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "x").write_text("mine")
    with pytest.raises(BadInput, match="already holds"), claimed(tmp_path / "o", "sim"):
        pass
    assert (tmp_path / "o" / "x").read_text() == "mine"


def test_a_glob_over_a_runs_folder_skips_its_other_files(capsys):
    from rolloutlab.commands.calibrate.group import run_dir_args

    runs = run_dir_args(["tests/data/verl_tb/SOURCE.md", "tests/data/verl_tb/q3b_fsdp_base"])
    assert runs == ["tests/data/verl_tb/q3b_fsdp_base"]
    assert "skipping tests/data/verl_tb/SOURCE.md" in capsys.readouterr().err
    with pytest.raises(BadInput, match="no run folder"):
        run_dir_args(["tests/data/verl_tb/SOURCE.md"])


def test_a_calibration_out_may_replace_a_calibration_only(tmp_path):
    import shutil

    from rolloutlab.calibration.scenarios.writer import OutputError, check_replaceable

    shutil.copy("sim/data/gsm8k.json", tmp_path / "c.json")
    assert check_replaceable(tmp_path / "c.json") == tmp_path / "c.json"
    assert check_replaceable(tmp_path / "new" / "d.json") == tmp_path / "new" / "d.json"
    (tmp_path / "n.json").write_text('{"mine": 1}')
    with pytest.raises(OutputError, match="not a calibration JSON"):
        check_replaceable(tmp_path / "n.json")
