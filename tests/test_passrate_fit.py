"""Pass-rate calibration (calibration/fits/passrate_fit.py) and `rolloutlab calibrate pass-rate`."""

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.calibration.fits.passrate_fit import (
    conditional_nll,
    fit_beta_binomial,
    fit_coupling,
    log_elementary_symmetric,
    standardised_log_length,
)
from rolloutlab.calibration.readers.grouped import GroupedDataError
from rolloutlab.calibration.scenarios.groups import read_pass_rate_samples
from scipy.special import expit, logsumexp

from rolloutlab.cli import main

FIXTURE = Path(__file__).parent / "data" / "qwen25_math_cot_100" / "scores.jsonl"
SIM_DATA = Path(__file__).parent.parent / "sim" / "data"


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("a", "b"), [(0.6, 1.4), (2.0, 0.5)])
def test_beta_binomial_recovers_known_parameters(seed, a, b):
    rng = np.random.default_rng(seed)
    n = np.full(400, 8)
    k = rng.binomial(n, rng.beta(a, b, n.size))
    fit = fit_beta_binomial(k, n)
    assert abs(fit["alpha"] - a) < 4 * fit["se"]["alpha"]
    assert abs(fit["beta"] - b) < 4 * fit["se"]["beta"]
    assert fit["se"]["alpha"] < 0.5 * a  # the SE is informative, not a huge band


def test_beta_binomial_bad_counts():
    with pytest.raises(ValueError, match="every sample"):
        fit_beta_binomial([8, 8], [8, 8])
    with pytest.raises(ValueError, match="0 <= k <= n"):
        fit_beta_binomial([9], [8])


def test_conditional_likelihood_by_enumeration():
    z = standardised_log_length(np.array([100.0, 200, 300, 800]))
    y = np.array([True, True, False, False])
    c = -0.7
    num = np.exp(c * z[y].sum())
    den = sum(np.exp(c * z[list(s)].sum()) for s in itertools.combinations(range(4), 2))
    assert conditional_nll(c, [(z, y)]) == pytest.approx(-np.log(num / den))


@settings(max_examples=60, deadline=None)
@given(
    u=st.lists(st.lists(st.floats(-30, 30), min_size=1, max_size=6), min_size=1, max_size=4).filter(
        lambda rows: len({len(r) for r in rows}) == 1
    ),
    data=st.data(),
)
def test_elementary_symmetric_by_enumeration(u, data):
    """log e_k(exp(u)) of each row equals the log of the sum over k-subsets, also with
    large and very different u (the shift keeps it finite)."""
    u = np.array(u)
    k = np.array([data.draw(st.integers(0, u.shape[1])) for _ in range(u.shape[0])])
    got = log_elementary_symmetric(u, k)
    for row, kk, g in zip(u, k, got, strict=True):
        terms = [row[list(s)].sum() for s in itertools.combinations(range(row.size), kk)]
        assert g == pytest.approx(logsumexp(terms), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("c_true", [-1.0, 0.5])
def test_coupling_recovers_known_value(c_true):
    rng = np.random.default_rng(7)
    correct, lengths = [], []
    for _ in range(300):
        L = rng.lognormal(7, 0.5, 8)
        p = expit(rng.normal(0, 1.5) + c_true * standardised_log_length(L))
        correct.append(rng.random(8) < p)
        lengths.append(L)
    fit = fit_coupling(correct, lengths)
    assert abs(fit["coupling"] - c_true) < 4 * fit["se"]


def test_fixture_fit_and_bundled_block():
    data = read_pass_rate_samples(FIXTURE, lengths_field="response_chars")
    k = np.array([c.sum() for c in data.correct])
    assert k.sum() == 728 and len(k) == 100  # 0.91 of 800 samples correct
    fit = fit_beta_binomial(k, np.full(100, 8))
    assert abs(fit["mean"] - 0.91) < 2 * fit["mean_se"]
    coup = fit_coupling(data.correct, data.lengths)
    assert coup["informative_groups"] == 10  # 14 groups not all-correct, 4 all-wrong
    # the MATH block ships as a --pass-rate file (the scenarios carry the verl fit)
    block = json.loads((SIM_DATA / "pass_rates" / "math_cot_100.json").read_text())["pass_rate"]
    assert block["fit"]["alpha"] == pytest.approx(fit["alpha"], rel=1e-4)
    assert block["coupling"] == pytest.approx(coup["coupling"], abs=1e-3)
    assert "not this scenario's own workload" in block["provenance"]["note"].lower()


def test_reader_errors(tmp_path):
    """One line naming file, line and field (the general reader, calibration.readers.grouped)."""
    f = tmp_path / "x.jsonl"
    cases = [
        ('{"score": [1, 0], "n": [3, 4]}\n{"idx": 2, "n": [3, 4]}\n', r"x.jsonl: line 2: no correctness field 'score'"),
        ('{"score": [true, "yes"], "n": [3, 4]}\n', r"x.jsonl: line 1: field 'score': expected a number"),
        ('{"score": [true, 0.5], "n": [3, 4]}\n', r"x.jsonl: line 1: field 'score': correctness 0.5 is not a boolean or 0/1"),
        ('{"score": [true, false], "n": [3]}\n', r"x.jsonl: line 1: field 'score': 2 values for 1 samples"),
        ('{"score": [true, false]}\n', r"x.jsonl: line 1: no field 'n' \(lengths\)"),
        ('{"n": [3, 4]}\n', r"x.jsonl: line 1: no field 'score' \(reward\)"),
    ]  # fmt: skip
    for content, message in cases:
        f.write_text(content)
        with pytest.raises(GroupedDataError, match=message):
            read_pass_rate_samples(f, lengths_field="n")


def test_reader_layouts_agree(tmp_path):
    """Per-prompt JSONL, per-sample JSONL and per-prompt CSV of the same groups read the
    same; response texts become character counts; no lengths field: no lengths."""
    groups = [([1, 0, 1], ["ab", "c", "defg"]), ([0, 0, 1], ["x" * 7, "yy", "z"])]
    per_prompt = tmp_path / "p.jsonl"
    per_prompt.write_text(
        "".join(
            json.dumps({"idx": i, "score": y, "code": t}) + "\n" for i, (y, t) in enumerate(groups)
        )
    )
    per_sample = tmp_path / "s.jsonl"
    per_sample.write_text(
        "".join(
            json.dumps({"prompt_id": i, "score": bool(yj), "response_length": len(tj)}) + "\n"
            for i, (y, t) in enumerate(groups)
            for yj, tj in zip(y, t, strict=True)
        )
    )
    csv = tmp_path / "p.csv"
    csv.write_text("idx,score,lengths\n" + "".join(
        f'{i},"{y}","{[len(x) for x in t]}"\n' for i, (y, t) in enumerate(groups)
    ))  # fmt: skip
    want_y = [np.array(y, bool) for y, _ in groups]
    want_L = [np.array([len(x) for x in t], float) for _, t in groups]
    for path, field in ((per_prompt, "code"), (per_sample, "response_length"), (csv, "lengths")):
        d = read_pass_rate_samples(path, lengths_field=field)
        for got, want in zip(d.correct + d.lengths, want_y + want_L, strict=True):
            np.testing.assert_array_equal(got, want)
    assert read_pass_rate_samples(per_prompt).length_unit == "characters (no tokenizer given)"
    spelled = read_pass_rate_samples(per_sample)  # no code field: found by common spelling
    np.testing.assert_array_equal(spelled.lengths[1], want_L[1])
    only = tmp_path / "only.jsonl"  # correctness only, per prompt and per sample
    only.write_text(
        "".join(json.dumps({"idx": i, "score": y}) + "\n" for i, (y, _) in enumerate(groups))
    )
    only_s = tmp_path / "only_s.jsonl"
    only_s.write_text(
        "".join(
            json.dumps({"prompt_id": i, "correct": yj}) + "\n"
            for i, (y, _) in enumerate(groups)
            for yj in y
        )
    )
    for path, field in ((only, "score"), (only_s, "correct")):
        bare = read_pass_rate_samples(path, score_field=field)
        assert bare.lengths is None and bare.length_unit == "none"
        for got, want in zip(bare.correct, want_y, strict=True):
            np.testing.assert_array_equal(got, want)


def _run(args):
    return CliRunner().invoke(main, ["calibrate", "pass-rate", *args])


def test_cli_writes_block_and_merges(tmp_path):
    out = tmp_path / "pr.json"
    r = _run([str(FIXTURE), "--out", str(out), "--lengths-field", "response_chars"])
    assert r.exit_code == 0, r.output
    block = json.loads(out.read_text())["pass_rate"]
    assert block["spec"].startswith("beta:") and block["provenance"]["n_samples"] == 800
    scen = tmp_path / "scen.json"
    shutil.copy(SIM_DATA / "gsm8k.json", scen)
    before = json.loads(scen.read_text())
    r = _run([str(FIXTURE), "--out", str(scen), "--lengths-field", "response_chars"])
    assert r.exit_code == 0, r.output
    after = json.loads(scen.read_text())
    assert {k: v for k, v in after.items() if k != "pass_rate"} == {
        k: v for k, v in before.items() if k != "pass_rate"
    }


def test_cli_bad_input_exit_2_nothing_written(tmp_path):
    out = tmp_path / "pr.json"
    args = ["--lengths-field", "response_chars"]
    r = _run([str(FIXTURE), "--out", str(out), "--score-field", "correct", *args])
    assert r.exit_code == 2 and "line 1: no field 'correct' (reward)" in r.output
    assert "scores.jsonl" in r.output and not out.exists()
    r = _run([str(FIXTURE), "--out", str(out), "--responses-field", "code"])  # named: needed
    assert r.exit_code == 2 and "scores.jsonl: line 1: no field 'code'" in r.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"score": [1, 0], "response_chars": [3, 4]}\n{"score": [1, 2], "response_chars": [3, 4]}\n'
    )
    r = _run([str(bad), "--out", str(out), *args])
    assert r.exit_code == 2 and not out.exists()
    assert r.output.strip().splitlines() == [
        f"Error: {bad}: line 2: field 'score': correctness 2 is not a boolean or 0/1"
    ]
    for content in ("not json", '{"name": "something else"}'):
        other = tmp_path / "other.json"
        other.write_text(content)
        r = _run([str(FIXTURE), "--out", str(other), "--lengths-field", "response_chars"])
        assert r.exit_code == 2 and "refusing to overwrite" in r.output
        assert other.read_text() == content


def test_cli_correctness_only_file_fits_pass_rates(tmp_path):
    """A file with correctness and no lengths field (regression: it was refused): the
    pass-rate fit is the one of the same file with lengths, the coupling is left at 0
    with a note."""
    only = tmp_path / "scores_only.jsonl"
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    only.write_text(
        "".join(json.dumps({"idx": r["idx"], "score": r["score"]}) + "\n" for r in rows)
    )
    out, ref = tmp_path / "only.json", tmp_path / "ref.json"
    r = _run([str(only), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "coupling not fitted" in r.output
    assert (
        _run([str(FIXTURE), "--out", str(ref), "--lengths-field", "response_chars"]).exit_code == 0
    )
    got, want = (json.loads(p.read_text())["pass_rate"] for p in (out, ref))
    assert got["spec"] == want["spec"] and got["coupling"] == 0.0 != want["coupling"]
    assert (
        got["fit"]["coupling_note"].startswith("not fitted") and "coupling_note" not in want["fit"]
    )
    assert got["fit"]["length_unit"] == "none" and got["provenance"]["n_samples"] == 800
    r = _run([str(FIXTURE), "--out", str(tmp_path / "x.json")])  # no code, no spelling: same
    assert r.exit_code == 0 and "coupling not fitted" in r.output
    r = _run([str(FIXTURE), "--out", str(tmp_path / "y.json"), "--score-field", "nope"])
    assert r.exit_code == 2 and "no field 'nope' (reward)" in r.output


def test_empty_responses_field_drops_lengths(tmp_path):
    """``--responses-field ''``: groups found through a common spelling, no coupling."""
    f = tmp_path / "p.jsonl"
    f.write_text('{"idx": 0, "score": [1, 0], "response": ["ab", "c"]}\n')
    assert read_pass_rate_samples(f).lengths is not None
    assert read_pass_rate_samples(f, lengths_field="").lengths is None
