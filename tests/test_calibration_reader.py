"""verl TensorBoard reading: known values of a real run, and bad input named precisely."""

from __future__ import annotations

import shutil

import pytest
from rolloutlab.calibration.fits.verl_fit import VerlFitConfig, step_data
from rolloutlab.calibration.readers.verl_tb import VerlLogError, read_run

from tests.calib_helpers import SAMPLE_RUN, verl_row, write_events


def test_sample_run_has_known_steps_and_values():
    t = read_run(SAMPLE_RUN)
    # step 0 holds only the validation before training; steps 1..105 are training steps
    assert t["step"].to_list() == list(range(0, 106))
    assert t["response_length/mean"].drop_nulls().len() == 105
    first = t.filter(t["step"] == 1).row(0, named=True)
    assert first["response_length/mean"] == pytest.approx(287.9498, abs=1e-3)
    assert first["response_length/max"] == 1024
    assert first["timing_s/gen"] == pytest.approx(29.8061, abs=1e-3)
    assert first["perf/total_num_tokens"] / (
        first["response_length/mean"] + first["prompt_length/mean"]
    ) == pytest.approx(5120, abs=0.5)


def test_sample_run_leaves_out_the_step_without_perf_tags():
    data = step_data(read_run(SAMPLE_RUN), "sample", VerlFitConfig(icc=0.75))
    assert data.dropped_steps == [0, 105] and len(data.fits) == 104 and set(data.n) == {5120}


def test_missing_folder_is_named(tmp_path):
    with pytest.raises(VerlLogError, match="nope"):
        read_run(tmp_path / "nope")


def test_folder_without_event_file_is_named(tmp_path):
    with pytest.raises(VerlLogError, match="no events.out.tfevents"):
        read_run(tmp_path)


def test_empty_event_file_is_named(tmp_path):
    (tmp_path / "events.out.tfevents.1").write_bytes(b"")
    with pytest.raises(VerlLogError, match=r"events.out.tfevents.1: empty"):
        read_run(tmp_path)


@pytest.mark.parametrize("cut", [5000, 200000])
def test_truncated_event_file_is_corrupt(tmp_path, cut):
    src = next(SAMPLE_RUN.glob("events.*")).read_bytes()
    (tmp_path / "events.out.tfevents.x").write_bytes(src[:cut])
    with pytest.raises(
        VerlLogError, match=r"events.out.tfevents.x: corrupt event file at record \d+"
    ):
        read_run(tmp_path)


def test_flipped_bytes_fail_the_crc(tmp_path):
    b = bytearray(next(SAMPLE_RUN.glob("events.*")).read_bytes())
    b[20000:20008] = b"\xff" * 8
    (tmp_path / "events.out.tfevents.x").write_bytes(bytes(b))
    with pytest.raises(VerlLogError, match="crc32"):
        read_run(tmp_path)


def test_run_without_response_length_tags_is_named(tmp_path):
    write_events(tmp_path, {1: {"timing_s/gen": 3.0}})
    with pytest.raises(VerlLogError, match=r"missing tag\(s\) \['response_length/mean'"):
        read_run(tmp_path)


@pytest.mark.parametrize(
    "tag,value,what",
    [
        ("timing_s__gen", float("nan"), "nan"),
        ("response_length__min", -3.0, "negative"),
        ("perf__total_num_tokens", float("inf"), "inf"),
    ],
)
def test_bad_values_name_tag_and_step(tmp_path, tag, value, what):
    rows = {s: verl_row(s) for s in range(1, 5)}
    rows[3] = verl_row(3, **{tag: value})
    f = write_events(tmp_path, rows)
    with pytest.raises(
        VerlLogError, match=rf"tag '{tag.replace('__', '/')}' at step 3 is .*{what}"
    ):
        step_data(read_run(tmp_path), str(f), VerlFitConfig(icc=0.75))


def test_second_event_file_wins_on_a_shared_step(tmp_path):
    shutil.copy(next(SAMPLE_RUN.glob("events.*")), tmp_path / "events.out.tfevents.1")
    write_events(tmp_path / "b", {1: {"timing_s/gen": 99.0}})
    shutil.move(next((tmp_path / "b").glob("events.*")), tmp_path / "events.out.tfevents.2")
    t = read_run(tmp_path)
    assert t.filter(t["step"] == 1)["timing_s/gen"].item() == 99.0
    assert t.filter(t["step"] == 2)["timing_s/gen"].item() == pytest.approx(31.2029, abs=1e-3)
