"""``compare idle --clock probe`` (analysis/idle/probe_clock.py) and the runners' speed probe."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.analysis.idle.probe_clock import (
    PROBE_FIELD,
    busy_map,
    on_probe_clock,
    speed_factors,
)
from rolloutlab.analysis.inputs.run_input import RunInputError, load_run, step_layouts
from rolloutlab.sim.trace.turns import TURN_SCHEMA

from rolloutlab.cli import main
from tests.compare_helpers import write_run


def _write_log(run_dir, cpu_gen_s, probe_s):
    """learner.jsonl with per-step generation CPU seconds and probe seconds."""
    rows = [
        {"step": t, "cpu_gen_s": float(c), "cpu_train_s": 0.0, "cpu_sync_s": 0.0}
        | ({} if p is None else {PROBE_FIELD: p})
        for t, (c, p) in enumerate(zip(cpu_gen_s, probe_s, strict=True))
    ]
    (run_dir / "learner.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_machine_twice_as_slow_from_halfway_gives_the_same_normalised_steps(tmp_path):
    quiet_dir = write_run(tmp_path / "quiet", [4] * 4)
    quiet = load_run(quiet_dir)
    gen = quiet.steps["gen_time"].to_numpy()
    _write_log(quiet_dir, gen, [0.01] * 4)
    # same work; from step 2 the machine runs it at half speed: wall, CPU and probe double
    slow_dir = write_run(tmp_path / "slow", [4] * 4, slow={2: 2.0, 3: 2.0})
    _write_log(slow_dir, gen * [1, 1, 2, 2], [0.01, 0.01, 0.02, 0.02])
    slow = load_run(slow_dir)
    assert step_layouts(slow)[3].finish_s.max() > 1.9 * step_layouts(quiet)[3].finish_s.max()
    for a, b in zip(
        step_layouts(on_probe_clock(slow, 2)), step_layouts(on_probe_clock(quiet, 2)), strict=True
    ):
        np.testing.assert_allclose(a.finish_s, b.finish_s, rtol=1e-12)


def test_speed_factors_are_relative_to_the_fit_steps_median():
    np.testing.assert_allclose(speed_factors(np.array([1.0, 3.0, 2.0, 4.0]), 3), [0.5, 1.5, 1, 2])


def test_busy_map_by_hand():
    # busy [1, 3] and [2, 4] merge to [1, 4]; [6, 7] busy; idle [0, 1] and [4, 6] kept
    knots, mapped, idle = busy_map(0.0, np.array([2.0, 1.0, 6.0]), np.array([4.0, 3.0, 7.0]), 0.5)
    assert idle == 3.0
    np.testing.assert_allclose(np.interp([0.5, 4.0, 5.0, 7.0], knots, mapped), [0.5, 2.5, 3.5, 5])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 10), st.floats(0, 5)), min_size=1, max_size=8
    ),  # (start, length)
    st.floats(0.1, 4.0),
)
def test_busy_map_is_monotone_and_adds_busy_times_rate_to_idle(intervals, rate):
    s = np.array([a for a, _ in intervals])
    e = s + np.array([d for _, d in intervals])
    knots, mapped, idle = busy_map(0.0, s, e, rate)
    assert (np.diff(knots) >= 0).all() and (np.diff(mapped) >= -1e-12).all()
    busy = e.max() - idle  # wall from 0 to the last end, less the idle
    assert mapped[-1] == pytest.approx(idle + busy * rate, abs=1e-9)


def _turns_run(tmp_path, cpu_scale, probe):
    """A 4-step run whose first rollout of each step calls a 1 s tool after the others
    finished (idle), then decodes 0.5 s alone; ``cpu_scale``: CPU s per busy wall s."""
    run_dir = write_run(tmp_path, [2] * 4, prompts=2)
    run = load_run(run_dir)
    rows, finish = [], []
    for r in run.rollouts.iter_rows(named=True):
        t0 = run.rollouts.filter(pl.col("step") == r["step"])
        end = float(t0["t_finish"].max())
        base = {"run_id": "s", "step": r["step"], "prompt_id": r["prompt_id"], "worker": 0}
        base |= {"sample_idx": r["sample_idx"], "context_tokens": 4, "prefill_tokens": 4}
        first = r["sample_idx"] == 0 and r["prompt_id"] == int(t0["prompt_id"].min())
        turn0 = {"turn": 0, "response_tokens": 3, "t_submit": r["t_submit"]}
        turn0 |= {"t_first_token": r["t_first_token"], "t_finish": end if first else r["t_finish"]}
        if first:
            tool = {"t_tool_request": end, "t_tool_start": end, "t_tool_end": end + 1.0}
            rows.append(base | turn0 | tool | {"finish_reason": "tool_call"})
            t1 = {"turn": 1, "response_tokens": 2, "t_submit": end + 1.0}
            rows.append(base | t1 | {"t_first_token": end + 1.1, "t_finish": end + 1.5})
        else:
            rows.append(base | turn0 | {"finish_reason": "stop"})
        finish.append(end + 1.5 if first else r["t_finish"])
    turns = pl.DataFrame(rows, schema=TURN_SCHEMA)
    rollouts = run.rollouts.with_columns(pl.Series("t_finish", finish))
    gen = rollouts.group_by("step", maintain_order=True).agg(
        (pl.col("t_finish").max() - pl.col("t_submit").min()).alias("g")
    )["g"]
    steps = run.steps.with_columns(pl.Series("gen_time", gen))
    _write_log(run_dir, (gen.to_numpy() - 1.0) * cpu_scale, probe)
    return dataclasses.replace(run, rollouts=rollouts, steps=steps, turns=turns)


def test_tool_sleeps_keep_their_wall_length_and_a_doubled_probe_cancels(tmp_path):
    ref = on_probe_clock(_turns_run(tmp_path / "a", [1, 1, 1, 1], [0.01] * 4), 2)
    slow = on_probe_clock(_turns_run(tmp_path / "b", [1, 1, 2, 2], [0.01, 0.01, 0.02, 0.02]), 2)
    for got in (ref, slow):
        assert got.turns is not None
        lat = got.turns.drop_nulls("t_tool_end")
        np.testing.assert_allclose(lat["t_tool_end"] - lat["t_tool_request"], 1.0)
    np.testing.assert_allclose(ref.steps["gen_time"], slow.steps["gen_time"], rtol=1e-12)
    np.testing.assert_allclose(ref.turns["t_finish"], slow.turns["t_finish"], rtol=1e-12)
    # a busy CPU second per busy wall second at reference speed: the wall timeline back
    base = _turns_run(tmp_path / "c", [1, 1, 1, 1], [0.01] * 4)
    np.testing.assert_allclose(ref.rollouts["t_finish"], base.rollouts["t_finish"], rtol=1e-9)


@pytest.mark.parametrize(
    "probe", [[None] * 4, [0.01, 0.01, None, 0.01], [0.01, 0.0, 0.01, 0.01], [0.01, -1, 1, 1]]
)
def test_a_run_without_a_usable_probe_is_refused_naming_file_and_field(tmp_path, probe):
    run_dir = write_run(tmp_path / "r", [4] * 4)
    _write_log(run_dir, [0.1] * 4, probe)
    with pytest.raises(RunInputError, match="timing_s/probe"):
        on_probe_clock(load_run(run_dir), 2)
    args = ["compare", "idle", "--real", str(run_dir), "--clock", "probe", "--fit-steps", "2"]
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and f"learner.jsonl: field {PROBE_FIELD} missing" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_the_probe_clock_runs_through_compare_idle(tmp_path):
    run_dir = write_run(tmp_path / "r", [4] * 4)
    _write_log(run_dir, load_run(run_dir).steps["gen_time"].to_numpy(), [0.01] * 4)
    args = ["compare", "idle", "--real", str(run_dir), "--clock", "probe", "--fit-steps", "2"]
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "o" / "idle_summary.csv").exists()
