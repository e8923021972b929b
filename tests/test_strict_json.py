"""Strict JSON (sim/trace/strict_json.py): non-finite numbers become null, the text is JSON a
strict parser accepts, files are replaced atomically; config.json goes through it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rolloutlab.sim.scenario.provenance import write_config
from rolloutlab.sim.trace import strict_json


def _strict_loads(text: str):
    def refuse(name):
        raise ValueError(name)

    return json.loads(text, parse_constant=refuse)


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(values)
def test_any_value_dumps_to_strict_json_with_finite_numbers_kept(v):
    back = _strict_loads(strict_json.dumps(v))

    def same(a, b):
        if isinstance(a, float):
            return b is None if not math.isfinite(a) else b == a
        if isinstance(a, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        return a == b

    assert same(v, back)


def test_numpy_values_and_tuples_are_plain():
    d = {"a": np.float64("nan"), "b": np.int64(3), "c": (1.5, np.inf), "d": np.array([1.0, np.nan])}
    assert _strict_loads(strict_json.dumps(d)) == {
        "a": None,
        "b": 3,
        "c": [1.5, None],
        "d": [1.0, None],
    }


def test_a_value_json_cannot_hold_is_refused_unless_a_default_converts_it():
    with pytest.raises(TypeError):
        strict_json.dumps({"x": object()})
    assert strict_json.dumps({"x": {1, 2}}, default=sorted) == '{"x": [1, 2]}'


def test_write_json_replaces_atomically_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("old")
    strict_json.write_json(path, {"v": float("inf")})
    assert json.loads(path.read_text()) == {"v": None}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]


def test_config_json_has_null_not_nan(tmp_path):
    write_config(tmp_path / "config.json", {"command": "sim", "lr": float("nan"), "tau": math.inf})
    text = (tmp_path / "config.json").read_text()
    doc = _strict_loads(text)
    assert doc["lr"] is None and doc["tau"] is None and "NaN" not in text
