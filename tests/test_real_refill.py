"""DAPO dynamic sampling with refill (real/runners/refill.py) and its end-to-end run."""

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.real.runners.refill import run_rounds, sampling_record

group = st.lists(st.integers(0, 1), min_size=2, max_size=2)


@settings(max_examples=30, deadline=None)
@given(st.data(), st.integers(1, 5), st.integers(0, 5))
def test_refill_keeps_only_informative_groups_and_aborts_exactly_when_the_cap_bites(data, B, cap):
    plan = data.draw(st.lists(st.lists(group, min_size=B, max_size=B), min_size=1, max_size=6))
    if cap == 0 and not any(a != b for rnd in plan for a, b in rnd):
        return  # unlimited rounds with no informative group would never end
    calls = []

    def gen(r):
        calls.append(r)
        return torch.tensor(plan[r % len(plan)], dtype=torch.float64)

    out = run_rounds(gen, B, cap)
    rewards = torch.cat([torch.tensor(plan[r % len(plan)]) for r in calls])
    homogeneous = rewards.max(1).values == rewards.min(1).values
    assert not (out.keep & homogeneous).any()  # never trains a homogeneous group
    assert out.kept_groups <= B and calls == list(range(out.rounds))
    assert out.generated_groups == rewards.shape[0] == B * out.rounds
    informative = int((~homogeneous).sum())
    assert out.kept_groups == min(B, informative)  # kept in order until B
    assert out.aborted == (out.kept_groups < B)
    assert out.aborted == (cap > 0 and out.rounds == cap and out.kept_groups < B)
    if not out.aborted:  # stopped at the first round that completed the batch
        before = rewards[: B * (out.rounds - 1)]
        assert int((before.max(1).values != before.min(1).values).sum()) < B


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="max-gen-batches"):
        run_rounds(lambda r: torch.zeros(1, 2), 1, -1)
    with pytest.raises(ValueError, match="returned 1 groups, not 2"):
        run_rounds(lambda r: torch.zeros(1, 2), 2, 1)


def test_sampling_record_counts_wasted_time_of_groups_not_trained():
    class R:
        def __init__(self, a, b):
            self.t_submit_s, self.t_finish_s = a, b

    rewards = torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    rec = sampling_record(
        rewards, torch.tensor([True, False]), [R(0, 1), R(0, 2), R(1, 4), R(1, 2)], 2, None
    )
    assert rec["wasted_rollout_s"] == 4.0  # (4 - 1) + (2 - 1): the second group
    assert (rec["informative_groups"], rec["generated_groups"], rec["kept_groups"]) == (1, 2, 1)
    assert rec["dynamic_sampling_abort"] is False and rec["gen_rounds"] == 1
    assert rec["reward_mean"] == 0.75 and rec["informative_frac"] == 0.5


def test_a_refill_run_trains_only_informative_groups_and_records_its_rounds(tmp_path):
    from rolloutlab.real.runners.sync import run_sync

    from tests.real_helpers import tiny_config

    cfg = tiny_config(
        task_name="graph-walk", refill=True, max_gen_batches=3, steps=2, controller="static:4"
    )
    rollouts, steps = run_sync(cfg, tmp_path / "r", progress=False)
    rows = [json.loads(x) for x in (tmp_path / "r" / "learner.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and steps.height == 2
    for row in rows:
        assert 1 <= row["gen_rounds"] <= 3
        assert row["generated_groups"] == 2 * row["gen_rounds"]
        assert row["kept_groups"] <= min(2, row["informative_groups"])
        assert row["dynamic_sampling_abort"] == (row["kept_groups"] < 2)
        assert row["dynamic_sampling_abort"] or row["gen_rounds"] < 3 or row["kept_groups"] == 2
    assert "heldout_accuracy" in rows[-1] and rows[-1]["heldout_accuracy"] is not None
    # the trace (schema v2) carries the same columns, and every rollout its reward
    for col in ("gen_rounds", "generated_groups", "kept_groups", "dynamic_sampling_abort"):
        assert steps[col].to_list() == [row[col] for row in rows]
    assert rollouts.height == sum(4 * row["generated_groups"] for row in rows)
    assert rollouts["reward"].null_count() == 0
    assert rollouts["correct"].to_list() == [r == 1.0 for r in rollouts["reward"].to_list()]
    assert rollouts["prompt_id"].n_unique() == sum(row["generated_groups"] for row in rows)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--task", "maze"], "--task"),
        (["--target-accuracy", "0"], "--target-accuracy"),
        (["--target-accuracy", "1.5"], "--target-accuracy"),
        (["--max-gen-batches", "-1"], "--max-gen-batches"),
    ],
)
@pytest.mark.parametrize("command", ["sync", "async"])
def test_bad_task_target_or_cap_exits_2_and_writes_nothing(tmp_path, args, message, command):
    from click.testing import CliRunner

    from rolloutlab.cli import main

    res = CliRunner().invoke(main, ["real", command, "--out", str(tmp_path / "r"), *args])
    assert res.exit_code == 2 and message in res.output
    assert not (tmp_path / "r").exists()


def test_async_refuses_refill_before_writing(tmp_path):
    from click.testing import CliRunner

    from rolloutlab.cli import main

    res = CliRunner().invoke(
        main, ["real", "async", "--dynamic-sampling", "--out", str(tmp_path / "r")]
    )
    assert res.exit_code == 2 and "real sync" in res.output
    assert not (tmp_path / "r").exists()
