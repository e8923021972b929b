"""Pass-rate models, keyed correctness draws and the informative-group closed form."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.models.passrate import (
    BetaPassRate,
    EmpiricalPassRate,
    FixedPassRate,
    coupled_probs,
    draw_correct,
    parse_pass_rate,
)
from rolloutlab.sim.models.reward_metrics import informative, informative_prob
from scipy import stats


def test_specs_parse():
    assert parse_pass_rate("fixed:0.182") == FixedPassRate(0.182)
    assert parse_pass_rate(" beta:0.6,1.4 ") == BetaPassRate(0.6, 1.4)
    assert parse_pass_rate("fixed:0").initial(0, np.arange(3)).tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "spec,needle",
    [
        ("fixed:1.5", "[0, 1]"),
        ("fixed:-0.1", "[0, 1]"),
        ("fixed:nan", "[0, 1]"),
        ("fixed:abc", "numbers"),
        ("beta:0,1", "A must be finite and > 0"),
        ("beta:1,-2", "B must be finite and > 0"),
        ("beta:nan,1", "A must be finite and > 0"),
        ("beta:1", "beta:A,B"),
        ("no/such/file.csv", "existing file"),
    ],
)
def test_bad_specs_name_the_option(spec, needle):
    with pytest.raises(ValueError, match="--pass-rate") as exc:
        parse_pass_rate(spec)
    assert needle in str(exc.value)


def test_files(tmp_path):
    csv = tmp_path / "p.csv"
    csv.write_text("prompt,pass_rate\na,0.25\nb,0.75\n")
    m = parse_pass_rate(str(csv))
    assert isinstance(m, EmpiricalPassRate)
    assert set(m.initial(3, np.arange(200)).tolist()) == {0.25, 0.75}
    jl = tmp_path / "p.jsonl"
    jl.write_text('{"pass_rate": 0.5}\n\n{"pass_rate": 1.0}\n')
    assert set(parse_pass_rate(str(jl)).initial(0, np.arange(100)).tolist()) == {0.5, 1.0}
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps({"pass_rate": {"spec": "beta:2,3", "coupling": -0.4}}))
    m = parse_pass_rate(str(fit))
    assert m == BetaPassRate(2.0, 3.0, -0.4)
    vals = tmp_path / "vals.json"
    vals.write_text(json.dumps({"values": [0.1, 0.2]}))
    assert parse_pass_rate(str(vals)).initial(0, np.arange(50)).max() == 0.2


@pytest.mark.parametrize(
    "name,text,needle",
    [
        ("a.csv", "prompt,p\nx,0.3\n", "line 1 (header): no column 'pass_rate'"),
        ("b.csv", "pass_rate\n0.3\nhigh\n", "line 3, field 'pass_rate': not a number"),
        ("c.csv", "pass_rate\n0.3\n1.2\n", "line 3, field 'pass_rate': must be in [0, 1]"),
        ("d.jsonl", '{"score": 1}\n', "line 1: missing field 'pass_rate'"),
        ("e.json", '{"pass_rate": {"fit": 1}}', "missing field 'pass_rate.spec'"),
        ("f.json", '{"pass_rate": {"spec": "fixed:2"}}', "field 'pass_rate.spec'"),
        ("g.json", "{oops", "not valid JSON"),
        ("h.txt", "0.3", "unknown pass-rate file type"),
        ("i.csv", "pass_rate\n", "no pass rates"),
    ],
)
def test_bad_files_name_file_and_field(tmp_path, name, text, needle):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError) as exc:
        parse_pass_rate(str(path))
    assert name in str(exc.value) and needle in str(exc.value)


def test_initial_is_keyed_on_the_prompt():
    m = BetaPassRate(0.6, 1.4)
    ids = np.arange(1000)
    p = m.initial(7, ids)
    perm = np.random.default_rng(0).permutation(ids)
    assert np.array_equal(m.initial(7, perm), p[perm])  # a recurring prompt keeps its p_i
    assert not np.array_equal(m.initial(8, ids), p)
    # the keyed draws follow Beta(0.6, 1.4) (KS test at 1 %)
    assert stats.kstest(m.initial(1, np.arange(5000)), stats.beta(0.6, 1.4).cdf).pvalue > 0.01


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    step=st.integers(0, 10**6),
    G1=st.integers(1, 16),
    G2=st.integers(1, 16),
    p=st.floats(0, 1),
)
def test_sample_j_is_the_same_whatever_G(seed, step, G1, G2, p):
    ids = np.arange(5) * 7919
    a = draw_correct(seed, step, ids, G1, np.full(5, p))
    b = draw_correct(seed, step, ids, G2, np.full(5, p))
    k = min(G1, G2)
    assert np.array_equal(a[:, :k], b[:, :k])


def test_vectorised_steps_equal_step_by_step():
    ids = np.arange(12).reshape(3, 4)
    p = np.linspace(0.1, 0.9, 12).reshape(3, 4)
    block = draw_correct(5, np.array([3, 4, 5]), ids, 6, p)
    for i, t in enumerate((3, 4, 5)):
        assert np.array_equal(block[i], draw_correct(5, t, ids[i], 6, p[i]))


@settings(max_examples=25, deadline=None)
@given(p=st.floats(0.0, 1.0), G=st.integers(1, 32), seed=st.integers(0, 1000))
def test_informative_frac_matches_closed_form(p, G, seed):
    """Fraction of non-homogeneous groups vs 1 - p^G - (1-p)^G, within 4.5 binomial
    standard errors (plus a floor for q near 0 or 1)."""
    n = 4000
    c = draw_correct(seed, 0, np.arange(n), G, np.full(n, p))
    frac = informative(c).mean()
    q = float(informative_prob(p, G))
    se = np.sqrt(q * (1 - q) / n)
    assert abs(frac - q) <= 4.5 * se + 1e-3


def test_informative_frac_averages_over_the_beta_distribution():
    n, G = 20000, 8
    p = BetaPassRate(0.6, 1.4).initial(0, np.arange(n))
    frac = informative(draw_correct(0, 0, np.arange(n), G, p)).mean()
    expected = stats.beta(0.6, 1.4).expect(lambda x: informative_prob(x, G))
    assert abs(frac - expected) < 4.5 * np.sqrt(expected * (1 - expected) / n)


@settings(max_examples=25, deadline=None)
@given(
    p=st.floats(0.0, 1.0),
    coupling=st.floats(-3, 3),
    seed=st.integers(0, 100),
)
def test_coupling_keeps_the_group_mean_and_tilts_by_length(p, coupling, seed):
    rng = np.random.default_rng(seed)
    L = rng.integers(1, 4000, size=(6, 8))
    P = coupled_probs(np.full(6, p), L, coupling)
    assert np.allclose(P.mean(axis=1), p, atol=1e-9)
    if 0 < p < 1 and abs(coupling) > 0.1:
        longest, shortest = L.argmax(axis=1), L.argmin(axis=1)
        rows = np.arange(6)
        diff = P[rows, longest] - P[rows, shortest]
        assert np.all(np.sign(diff[L.max(axis=1) > L.min(axis=1)]) == np.sign(coupling))


def test_coupling_needs_lengths():
    with pytest.raises(ValueError, match="lengths"):
        draw_correct(0, 0, np.arange(2), 4, np.full(2, 0.5), coupling=-1.0)
