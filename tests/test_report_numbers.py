"""How numbers and column names are written for people (report pages, printed answers)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rolloutlab.analysis.figures import numbers as fmt


@pytest.mark.parametrize(
    "x,text",
    [(48209.448, "48,209"), (3309.324, "3,309"), (47.578, "47.6"), (4.0, "4.00"),
     (0.95388, "0.954"), (0.001, "0.00100"), (4e-6, "4e-6"), (2.5e-5, "2.5e-5"), (19200, "19,200"),
     (0, "0"), (None, "–"), (float("nan"), "–"), (-1234.6, "-1,235")],
)  # fmt: skip
def test_numbers_are_rounded_to_what_they_mean(x, text):
    assert fmt.number(x) == text


def test_seconds_fractions_and_durations():
    assert fmt.seconds(48209.448) == "48,209" and fmt.seconds(48209.448, "h") == "13.4"
    assert fmt.duration(48209.448) == "48,209 s (13.4 h)" and fmt.duration(526.3) == "526 s"
    assert fmt.percent(0.257) == "25.7" and fmt.percent(0.0042) == "0.420"
    assert fmt.seconds_unit([1e5, 2e5, 10.0]) == "h" and fmt.seconds_unit([10.0, 5e4]) == "s"


@pytest.mark.parametrize(
    "column,head",
    [("wall_clock_s", "wall clock (s)"), ("slot_idle_frac", "slot idle (%)"),
     ("straggler_rate", "straggler rate (%)"), ("tokens_per_s", "tokens/s"), ("mean_G", "mean G"),
     ("makespan_mdape", "makespan MdAPE (%)"), ("response_tokens", "response (tokens)"),
     ("prompts", "prompt batch B"), ("lr", "learning rate")],
)  # fmt: skip
def test_headers_carry_units(column, head):
    assert fmt.header(column) == head
    assert fmt.header("wall_clock_s", "h") == "wall clock (h)"


@given(st.floats(min_value=1e-3, max_value=1e12) | st.floats(min_value=-1e12, max_value=-1e-3))
def test_a_number_reads_back_within_its_three_digits_and_never_in_exponent_form(x):
    text = fmt.number(x)
    assert "e" not in text
    back = float(text.replace(",", ""))
    assert math.isclose(back, x, rel_tol=5e-3, abs_tol=5e-4)  # three significant digits


@given(
    st.lists(st.text("abcdefgh ", min_size=1, max_size=30), min_size=1, max_size=12),
    st.integers(1, 6),
    st.integers(40, 140),
)
def test_a_text_table_never_exceeds_its_width(heads, n_rows, width):
    rows = [[f"{i * 1234.5:,.1f}" for i in range(len(heads))] for _ in range(n_rows)]
    text = fmt.text_table(heads, rows, width, [True] + [False] * (n_rows - 1))
    body = text.splitlines()
    shown = [line for line in body if not line.startswith("(not shown")]
    assert all(len(line) <= width for line in shown) or len(heads[0]) + 2 > width
    assert body[-n_rows - (len(body) - len(shown))].startswith("* ")


def test_settings_are_written_as_set():
    assert [fmt.setting(x) for x in (3.0, 0.9, 1e-6, 0.001, 20)] == [
        "3",
        "0.9",
        "1e-6",
        "0.001",
        "20",
    ]
    assert fmt.cell("lr", 0.001) == "0.001" and fmt.cell("final_reward", 0.98966) == "0.990"
