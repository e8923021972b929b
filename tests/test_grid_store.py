"""grid.jsonl: a point's table reads back exactly (non-finite floats, nulls, types), the
file stays strict JSON, a line cut short is dropped on resume, and the spec hash ignores
key order but not values."""

from __future__ import annotations

import json
import math

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from rolloutlab.commands.grid.executor import LocalExecutor, Outcome
from rolloutlab.commands.grid.options import run_points
from rolloutlab.commands.grid.store import GridStore, spec_hash

floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.none())
rows = st.lists(
    st.tuples(st.integers(-(2**40), 2**40), floats, st.text(max_size=5), st.booleans()),
    min_size=1,
    max_size=5,
)
SCHEMA = {"i": pl.Int64, "x": pl.Float64, "s": pl.String, "b": pl.Boolean}


def _same(a: pl.DataFrame, b: pl.DataFrame) -> bool:
    """Equal tables, NaN equal to NaN, types included."""
    if a.schema != b.schema or a.height != b.height:
        return False
    for ra, rb in zip(a.iter_rows(), b.iter_rows()):
        for va, vb in zip(ra, rb):
            nan = (
                isinstance(va, float)
                and isinstance(vb, float)
                and math.isnan(va)
                and math.isnan(vb)
            )
            if not (nan or va == vb):
                return False
    return True


@settings(max_examples=30, deadline=None)
@given(tables=st.lists(rows, min_size=1, max_size=4))
def test_tables_read_back_exactly_and_the_file_is_strict_json(tmp_path_factory, tables):
    d = tmp_path_factory.mktemp("g")
    points = [{"k": i} for i in range(len(tables))]
    store = GridStore(d, "t", {}, points)
    store.open(resume=False)
    frames = [pl.DataFrame(t, schema=SCHEMA, orient="row") for t in tables]
    for i in reversed(range(len(frames))):  # finished out of order
        store.record(Outcome(i, "ok", frames[i], None, 1))
    for line in (d / "grid.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    again = GridStore(d, "t", {}, points)
    again.check_resume()
    got = again.table()
    assert got.columns == [*SCHEMA, "status", "error"]
    assert _same(got.drop("status", "error"), pl.concat(frames))


def test_a_line_cut_short_is_dropped_and_only_missing_points_run(tmp_path):
    points = [{"k": k} for k in range(4)]
    ran: list[int] = []

    def fn(p):
        ran.append(p["k"])
        return pl.DataFrame({"k": [p["k"]]})

    store = GridStore(tmp_path, "t", {"a": 1}, points)
    run_points(LocalExecutor(), store, fn, False, "t")
    lines = (tmp_path / "grid.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "grid.jsonl").write_text("".join(lines[:3]) + lines[3][:20])
    ran.clear()
    store = GridStore(tmp_path, "t", {"a": 1}, points)
    store.check_resume()
    run_points(LocalExecutor(), store, fn, True, "t")
    assert ran == [2, 3] and store.table()["k"].to_list() == [0, 1, 2, 3]


def test_spec_hash_ignores_key_order_not_values():
    assert spec_hash({"a": 1, "b": [1, 2]}) == spec_hash({"b": [1, 2], "a": 1})
    assert spec_hash({"a": 1, "b": [1, 2]}) != spec_hash({"a": 1, "b": [2, 1]})
