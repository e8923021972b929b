"""calibration.fits.transfer and calibration.readers.step_metrics: rho recovered from
data drawn with a known rho, the ICC at its extremes, the aggregates grid matching the
lognormal it was fitted to, and the metrics reader's refusals (file, line, field)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from rolloutlab.calibration.fits.lengths_fit import StepLengthStats
from rolloutlab.calibration.fits.transfer import (
    aggregate_grid,
    fit_rho,
    normal_score_icc,
    step_stats,
)
from rolloutlab.calibration.readers.record_files import GroupedDataError
from rolloutlab.calibration.readers.step_metrics import read_step_aggregates
from rolloutlab.calibration.validation.measure import padded
from rolloutlab.sim.models.copula_lengths import CopulaLengths

# a wide, nearly tie-free marginal (7 .. 3000 tokens)
GRID = np.sort(np.random.default_rng(0).choice(np.arange(7, 3000), 1024))[None]


def source_steps(rho: float, n_steps: int = 30) -> list[list[np.ndarray]]:
    model = CopulaLengths(GRID, (0,), rho, 3000)
    rng = np.random.default_rng(1)
    return [list(model.sample(rng, 8, 8, 0)) for _ in range(n_steps)]


@pytest.mark.parametrize("rho", [0.0, 0.4, 0.8])
def test_fit_rho_recovers_the_generating_rho(rho):
    steps = source_steps(rho)
    grid = GRID.repeat(30, 0)
    fit = fit_rho(
        [padded(s) for s in steps], lambda r: CopulaLengths(grid, tuple(range(30)), r, 3000), 8, 8
    )
    assert abs(fit.rho - rho) <= 0.15, fit
    assert len(fit.taus) >= 1 and all(t > 1 for t in fit.taus)


def test_normal_score_icc_extremes():
    rng = np.random.default_rng(2)
    tied = [[np.full(4, v) for v in rng.choice(np.arange(1, 500), 10, replace=False)]]
    assert normal_score_icc(tied) == pytest.approx(1.0)
    iid = [[rng.integers(1, 10_000, 4) for _ in range(200)] for _ in range(5)]
    assert normal_score_icc(iid) < 0.05
    assert normal_score_icc(source_steps(0.8)) > normal_score_icc(source_steps(0.4)) > 0.1


def test_aggregates_grid_has_the_lognormal_median():
    x = np.ceil(np.exp(np.random.default_rng(3).normal(5.0, 0.5, 4096)))
    s = step_stats([x], [x >= 2000], 0, 2000)
    grid = aggregate_grid([s], 2000)
    assert grid.shape == (1, 1024) and np.all(np.diff(grid[0]) >= 0)
    assert abs(np.median(grid[0]) / np.exp(5.0) - 1) < 0.05  # the lognormal's median


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def rec(step, mean=10.0, hi=20.0, lo=2.0, clip=0.0):
    return {
        "step": step,
        "response_length/mean": mean,
        "response_length/max": hi,
        "response_length/min": lo,
        "response_length/clip_ratio": clip,
    }


def test_reader_reads_jsonl_and_csv(tmp_path):
    rows = [rec(0), {"step": 0, "val/score": 1.0}, rec(1, mean=12)]
    got = read_step_aggregates(write_jsonl(tmp_path / "m.jsonl", rows), [0, 1], {0: 8, 1: 8}, 64)
    assert got[1] == StepLengthStats(1, 12.0, 20.0, 2.0, 0.0, 8, 64)
    csv = tmp_path / "m.csv"
    keys = list(rec(0))
    csv.write_text(",".join(keys) + "\n" + ",".join(str(rec(3)[k]) for k in keys) + "\n")
    assert read_step_aggregates(csv, [3], {3: 4}, 64)[0].mean == 10.0


@pytest.mark.parametrize(
    ("rows", "words"),
    [
        ([rec(0), rec(1, mean=float("nan"))], "line 2: field 'response_length/mean': bad value"),
        ([rec(0), rec(1, lo=11)], "line 2: field 'response_length': min > mean"),
        ([rec(0, hi=9)], "line 1: field 'response_length': mean > max"),
        ([rec(0, hi=99)], "max 99 above the cap 64"),
        ([rec(0, clip=1.5)], "clip_ratio outside [0, 1]"),
        ([rec(0), rec(0)], "line 2: field 'step': step 0 twice"),
        ([rec(0)], "field 'step': no record of step 1"),
        ([{"step": 0, "response_length/mean": 3}], "field 'response_length/max': missing"),
        ([{"iteration": 0}], "field 'step': missing"),
        ([rec(0), rec(-1)], "line 2: field 'step': bad value -1"),
    ],
)
def test_reader_refuses(tmp_path, rows, words):
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    with pytest.raises(GroupedDataError, match="m.jsonl: ") as err:
        read_step_aggregates(path, [0, 1], {0: 8, 1: 8}, 64)
    assert words in str(err.value)


def test_reader_refuses_other_formats(tmp_path):
    (tmp_path / "m.txt").write_text("step:1 - response_length/mean:3\n")
    with pytest.raises(GroupedDataError, match=r"m.txt: line 1: field 'step': not a metrics"):
        read_step_aggregates(tmp_path / "m.txt", [0], {0: 8}, 64)
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    with pytest.raises(GroupedDataError, match="bad.jsonl: line 1: not a readable metrics"):
        read_step_aggregates(tmp_path / "bad.jsonl", [0], {0: 8}, 64)
    with pytest.raises(GroupedDataError, match="no such file"):
        read_step_aggregates(tmp_path / "nope.jsonl", [0], {0: 8}, 64)
