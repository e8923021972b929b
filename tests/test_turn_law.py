"""Turn-count laws (sim/models/turn_law.py) and their fit by likelihood
(calibration/fits/turn_law_fit.py)."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.calibration.fits.turn_law_fit import fit_turn_law
from rolloutlab.sim.models.turn_law import TurnLaw, turn_law_from
from rolloutlab.sim.models.turns import multi_turn_from


@settings(max_examples=50, deadline=None)
@given(
    k0=st.integers(1, 4),
    extra=st.floats(0.0, 5.0),
    span=st.integers(0, 6),
    u=st.lists(st.floats(1e-9, 1.0), min_size=1, max_size=30),
)
def test_geometric_draws_stay_in_min_max(k0, extra, span, u):
    law = TurnLaw("geometric", k0 + extra, k0 + span, k0)
    n = law.from_uniform(np.array(u))
    assert (n >= k0).all() and (n <= k0 + span).all()
    assert turn_law_from(json.loads(json.dumps(law.to_dict()))) == law  # JSON round trip


def test_geometric_with_a_minimum_has_its_mean():
    u = np.random.default_rng(0).uniform(1e-12, 1.0, 40_000)
    n = TurnLaw("geometric", 4.0, 200, 2).from_uniform(u)
    assert n.min() == 2 and abs(n.mean() - 4.0) < 0.05  # shifted geometric, p = 1/3


def test_empirical_draws_have_the_table_frequencies():
    law = turn_law_from({"law": "empirical", "values": [4, 2, 3], "probs": [0.5, 0.25, 0.25]})
    n = law.from_uniform(np.random.default_rng(1).uniform(1e-12, 1.0, 40_000))
    freq = {v: float((n == v).mean()) for v in (2, 3, 4)}
    assert freq == pytest.approx({2: 0.25, 3: 0.25, 4: 0.5}, abs=0.01)
    assert law.min == 2 and law.max == 4 and law.mean == pytest.approx(3.25)


@pytest.mark.parametrize(
    "turns, field",
    [
        ({"law": "geometric", "mean": 2, "max": 4, "min": 0}, "turns.min"),
        ({"law": "geometric", "mean": 2, "max": 4, "min": 3}, "min <= max, mean >= min"),
        ({"law": "geometric", "mean": 3, "max": 2, "min": 3}, "min <= max"),
        ({"law": "empirical", "values": [2, 3], "probs": [0.5, 0.6]}, "turns.probs"),
        ({"law": "empirical", "values": [0, 3], "probs": [0.5, 0.5]}, "turns.values"),
        ({"law": "empirical", "values": [2, 2], "probs": [0.5, 0.5]}, "turns.values"),
        ({"law": "empirical", "values": [2], "probs": [0.5, 0.5]}, "turns.values"),
        ({"law": "empirical", "values": [2, 3], "probs": [float("nan"), 1.0]}, "turns.probs"),
        ({"law": "empirical", "values": 3}, "turns.values"),
        ({"law": "poisson", "mean": 2, "max": 4}, "turns.law"),
    ],
)
def test_bad_turn_laws_name_the_field(turns, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        multi_turn_from({"turns": turns})


def test_fit_picks_the_law_that_generated_the_counts():
    rng = np.random.default_rng(0)
    geo = TurnLaw("geometric", 2.5, 6).from_uniform(rng.uniform(1e-12, 1.0, 3000))
    law, aic = fit_turn_law(geo)
    assert law.law == "geometric" and law.min == 1 and abs(law.mean - 2.5) < 0.15
    shifted = TurnLaw("geometric", 4.0, 12, 2).from_uniform(rng.uniform(1e-12, 1.0, 3000))
    law, aic = fit_turn_law(shifted)
    assert law.law == "geometric" and law.min == 2 and abs(law.mean - 4.0) < 0.2
    assert aic["geometric_min"] < aic["geometric"]
    uniform = rng.integers(2, 5, 3000)  # the lookup task: 1-3 lookups, 2-4 turns
    law, aic = fit_turn_law(uniform)
    assert law.law == "empirical" and law.values == (2, 3, 4)
    assert aic["empirical"] < min(aic["geometric"], aic["geometric_min"])
    assert fit_turn_law(np.full(5, 3))[0] == TurnLaw("fixed", 3.0, 3, 3)
    with pytest.raises(ValueError, match="turn counts"):
        fit_turn_law(np.array([0, 2]))
