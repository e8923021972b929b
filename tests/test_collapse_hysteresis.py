"""The collapse detector's hysteresis (real.runners.collapse): an isolated spike of
KL, importance ratio or entropy does not fire; a sustained excursion does, at its
``patience``-th step, and ``failure`` names the signal."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.real.runners.collapse import CollapseConfig, replay

HYST = CollapseConfig(kl_patience=3, release=0.5, entropy_frac=0.3)


def steps(n: int, **series: dict[int, float]) -> list[dict]:
    """``n`` healthy steps (reward 0.7, KL 0.1, |log ratio| 0.05, entropy 1.0); ``series``
    maps a signal name to ``{step: value}`` overrides."""
    base = {"kl": 0.1, "log_ratio": 0.05, "entropy": 1.0}
    return [
        {
            "step": t,
            "reward_mean": 0.7,
            "loss": 0.1,
            "grad_norm": 1.0,
            **{k: series.get(k, {}).get(t, v) for k, v in base.items()},
        }
        for t in range(n)
    ]


@pytest.mark.parametrize(("signal", "spike"), [("kl", 50.0), ("log_ratio", 5.0), ("entropy", 0.01)])
def test_an_isolated_spike_does_not_fire(signal, spike):
    d = replay(steps(60, **{signal: {30: spike}}), HYST)
    assert not d.collapsed and d.failure == "none"


@pytest.mark.parametrize(
    ("signal", "value", "failure"),
    [("kl", 3.0, "kl"), ("log_ratio", 1.5, "ratio"), ("entropy", 0.1, "entropy")],
)
def test_a_sustained_excursion_fires_and_names_its_signal(signal, value, failure):
    d = replay(steps(60, **{signal: {t: value for t in range(20, 60)}}), HYST)
    assert d.failure == failure
    assert d.t_collapse == 20 + HYST.kl_patience  # 1-based: fires on the 3rd step (0-based 22)
    assert d.onset == 21  # the excursion's first step, 1-based


def test_a_signal_dithering_between_release_and_bound_keeps_counting():
    # 3.0, 1.5, 3.0: the dip stays above release * kl_max = 1.0, so the excursion goes on
    d = replay(steps(40, kl={10: 3.0, 11: 1.5, 12: 3.0}), HYST)
    assert d.failure == "kl" and d.t_collapse == 13 and d.onset == 11


def test_without_hysteresis_the_same_spike_fires_at_once():
    d = replay(steps(60, kl={30: 50.0}), CollapseConfig())
    assert d.failure == "kl" and d.t_collapse == 31


@pytest.mark.parametrize(
    "kw",
    [{"kl_max": math.nan}, {"kl_max": -1.0}, {"log_ratio_max": math.inf}, {"release": 0.0},
     {"release": 1.5}, {"entropy_frac": -0.1}, {"entropy_frac": 1.0}, {"kl_patience": 0}],
)  # fmt: skip
def test_invalid_thresholds_are_refused(kw):
    with pytest.raises(ValueError, match="CollapseConfig"):
        CollapseConfig(**kw)


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(10, 60),
    spikes=st.sets(st.integers(0, 59), max_size=20),
    height=st.floats(2.01, 1e6),
    patience=st.integers(2, 5),
)
def test_spikes_separated_by_calm_steps_never_fire(n, spikes, height, patience):
    # a spike is isolated when the step after it is calm (below release): then no
    # excursion lasts 2 steps, and any patience >= 2 keeps the detector silent
    isolated = {t for t in spikes if t < n and t + 1 not in spikes}
    cfg = CollapseConfig(kl_patience=patience, release=0.5)
    d = replay(steps(n, kl={t: height for t in isolated}), cfg)
    assert not d.collapsed


@settings(max_examples=150, deadline=None)
@given(
    start=st.integers(0, 30),
    length=st.integers(1, 30),
    patience=st.integers(1, 6),
    level=st.floats(2.01, 100.0),
)
def test_a_run_of_k_steps_above_fires_iff_k_reaches_patience(start, length, patience, level):
    cfg = CollapseConfig(kl_patience=patience, release=0.5)
    d = replay(steps(70, kl={t: level for t in range(start, start + length)}), cfg)
    assert d.collapsed == (length >= patience)
    if d.collapsed:
        assert d.failure == "kl" and d.t_collapse == start + patience and d.onset == start + 1
