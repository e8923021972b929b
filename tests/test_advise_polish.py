"""``advise``'s neighbour polish on hand-made objectives: it walks one grid step at a time to
an optimum that single-knob moves reach, stays put where only a two-knob move helps, moves
only on a win larger than the threshold, never leaves the feasible set, keeps to its
budget and writes every setting it priced."""

from __future__ import annotations

import json

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.analysis.advise.polish import POLISH_ROUNDS, default_budget, polish
from rolloutlab.analysis.advise.search import Constraints, SearchSpace, finish, trial_row

# Three searched knobs: prompts (5 steps), workers (5 steps), controller (3, categorical).
SPACE = SearchSpace(
    controller=("x", "y", "z"),
    prompts=(1, 2, 3, 4, 5),
    workers=(1, 2, 4, 8, 16),
    max_num_seqs=(64,),
    pipeline=("sync",),
    lr=(1e-6,),
)
C = Constraints(max_straggler_rate=0.5, min_collapse_margin=1.0)


def metrics(time: float, straggler_rate: float = 0.0) -> dict:
    return {
        "time_to_target_s": time,
        "time_per_step_s": time / 10,
        "wall_clock_s": time,
        "straggler_rate": straggler_rate,
        "collapse_margin": 2.0,
    }


def setting(controller: str, prompts: int, workers: int) -> dict:
    return {"controller": controller, "prompts": prompts, "workers": workers,
            "max_num_seqs": 64, "pipeline": "sync", "lr": 1e-6, "updates_per_batch": 1}  # fmt: skip


def separable(s: dict) -> dict:
    """Optimum (z, 4, 2) at 100 s; every knob's own bowl, so one-knob moves reach it."""
    i_p, i_w = SPACE.prompts.index(s["prompts"]), SPACE.workers.index(s["workers"])
    return metrics(100 + 5 * abs(i_p - 3) + 7 * abs(i_w - 1) + 3 * (s["controller"] != "z"))


def diagonal(s: dict) -> dict:
    """Optimum (x, 5, 16) at 50 s; everywhere else time grows with prompts and workers,
    so from (x, 1, 1) every single-knob move is slower."""
    if s["prompts"] == 5 and s["workers"] == 16:
        return metrics(50.0)
    return metrics(100 + s["prompts"] + s["workers"])


def start_table(start: dict, fn) -> pl.DataFrame:
    """A search's table holding one trial, the polish's starting point."""
    row, _, _ = trial_row(0, start, fn(start), C, use_target=True)
    return finish([row], SPACE.keys)


def run(fn, log: list | None = None):
    def batch(ss: list[dict]) -> list[dict]:
        if log is not None:
            log.append(list(ss))
        return [fn(s) for s in ss]

    return batch


def best_setting(table: pl.DataFrame) -> dict:
    row = table.filter("best").row(0, named=True)
    return {k: row[k] for k in SPACE.keys}


def test_reaches_an_optimum_three_single_knob_moves_away():
    start = setting("y", 3, 4)  # z, 4, 2 is one step away in each knob
    log: list = []
    p = polish(start_table(start, separable), SPACE, C, run(separable, log), 0.01, 100)
    assert best_setting(p.table) == setting("z", 4, 2) and p.end_s == 100.0
    assert p.moved and p.start_s == 100 + 5 + 7 + 3
    assert p.rounds == POLISH_ROUNDS == len(log)
    # each round prices the settings one step from where the walk stands, none twice
    assert all(len(b) <= 2 * 3 for b in log)
    priced = [json.dumps(s, sort_keys=True) for b in log for s in b]
    assert len(priced) == len(set(priced)) == p.trials
    polished = p.table.filter(pl.col("origin") == "polish")
    assert polished.height == p.trials and polished["trial"].min() == 1
    assert "the answer moved" in p.line() and "(-13.0%)" in p.line()


def test_stays_where_only_a_two_knob_move_helps():
    start = setting("x", 1, 1)
    p = polish(start_table(start, diagonal), SPACE, C, run(diagonal), 0.01, 100)
    assert not p.moved and best_setting(p.table) == start and p.rounds == 1
    # the three single-step neighbours were priced and written, the optimum never
    assert p.trials == 3 and p.table.filter(pl.col("origin") == "polish").height == 3
    assert p.table["time_s"].min() == 100 + 1 + 1
    assert "did not move: no neighbour faster by more than 1.0%" in p.line()


def test_a_win_within_the_threshold_is_a_tie_the_walk_does_not_follow():
    def shallow(s: dict) -> dict:  # each step up in prompts is 0.5 % faster
        return metrics(1000 * (1 - 0.005 * SPACE.prompts.index(s["prompts"])))

    p = polish(start_table(setting("x", 1, 1), shallow), SPACE, C, run(shallow), 0.01, 100)
    assert p.rounds == 1  # 0.5 % <= 1 %: no second round from prompts 2
    assert best_setting(p.table)["prompts"] == 2  # still the fastest setting priced
    assert p.line().endswith("prompts 1 -> 2 (-0.5%, a tie: within 1.0%)")
    bigger = polish(start_table(setting("x", 1, 1), shallow), SPACE, C, run(shallow), 0.004, 100)
    assert bigger.rounds == POLISH_ROUNDS and best_setting(bigger.table)["prompts"] == 4


def test_never_moves_to_an_infeasible_neighbour():
    def fast_but_straggling(s: dict) -> dict:
        straggles = s["workers"] > 1
        return metrics(50.0 if straggles else 100.0 + 10 * s["prompts"], 0.9 if straggles else 0.0)

    start = setting("x", 2, 1)
    p = polish(start_table(start, fast_but_straggling), SPACE, C, run(fast_but_straggling), 0.01, 9)
    assert best_setting(p.table) == setting("x", 1, 1)  # one step down in prompts
    assert p.table.filter("best")["feasible"].all()


def test_budget_caps_the_settings_priced_and_zero_turns_it_off():
    start = setting("y", 3, 4)
    table = start_table(start, separable)
    off = polish(table, SPACE, C, run(separable), 0.01, 0)
    assert off.trials == 0 and off.table.height == 1 and not off.moved
    assert off.table["origin"].to_list() == ["search"]
    three = polish(table, SPACE, C, run(separable), 0.01, 3)
    assert three.trials == 3 and three.table.height == 4
    with pytest.raises(ValueError, match="budget"):
        polish(table, SPACE, C, run(separable), 0.01, -1)
    assert default_budget(3) == 2 * 3 * POLISH_ROUNDS


def test_nothing_to_polish_without_a_feasible_trial():
    table = start_table(setting("x", 1, 1), lambda s: metrics(10.0, straggler_rate=1.0))
    p = polish(table, SPACE, C, run(separable), 0.01, 10)
    assert p.trials == 0 and p.start is None and "no feasible trial" in p.line()


@settings(max_examples=40, deadline=None)
@given(
    times=st.lists(st.floats(10, 1000), min_size=75, max_size=75),
    start=st.tuples(st.integers(0, 2), st.integers(0, 4), st.integers(0, 4)),
    budget=st.integers(0, 30),
    threshold=st.floats(0, 0.2),
)
def test_the_answer_is_the_fastest_setting_priced(times, start, budget, threshold):
    def table_fn(s: dict) -> dict:
        i = SPACE.controller.index(s["controller"])
        j, k = SPACE.prompts.index(s["prompts"]), SPACE.workers.index(s["workers"])
        return metrics(times[25 * i + 5 * j + k])

    first = setting(SPACE.controller[start[0]], SPACE.prompts[start[1]], SPACE.workers[start[2]])
    p = polish(start_table(first, table_fn), SPACE, C, run(table_fn), threshold, budget)
    assert p.trials <= budget and p.rounds <= POLISH_ROUNDS
    assert p.table.height == 1 + p.trials
    assert p.table.filter("best")["time_s"].item() == p.table["time_s"].min()
    assert p.table.select(SPACE.keys).is_unique().all()
