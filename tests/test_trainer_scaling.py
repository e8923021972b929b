"""Trainer time across GPU counts (calibration/validation/trainer_scaling.py): the published
table, the rules' arithmetic and the direction of verl's data-parallel wait."""

from __future__ import annotations

import pytest
from rolloutlab.calibration.validation.trainer_scaling import (
    SCRIPTS_FULLY_ASYNC,
    SETUPS,
    PhaseTableError,
    Point,
    Setup,
    curve_errors,
    load_curves,
    modelled_update_actor,
    worst,
)

ASYNC = [Point("fully-async", 16, 269.80, 4), Point("fully-async", 32, 156.98, 4),
         Point("fully-async", 64, 113.16, 4)]  # fmt: skip


def test_bundled_curves_are_the_published_rows():
    curves = load_curves()
    assert curves["fully-async"] == ASYNC
    assert [(p.trainer_gpus, p.update_actor_s) for p in curves["colocate-sync"]] == [
        (32, 313.81),
        (64, 133.41),
        (128, 113.81),
    ]


def test_rules_by_hand():
    errs = curve_errors(ASYNC, [4.0, 2.0, 1.0])
    # calibrated on 16: 269.80 / 4 = 67.45 at 64, 67.45 / 113.16 - 1
    assert errs["model"][0][2] == pytest.approx(-0.403941, abs=1e-6)
    assert errs["tokens_per_gpu"][0][2] == pytest.approx(-0.403941, abs=1e-6)
    # constant from 64 at 16: 113.16 / 269.80 - 1
    assert errs["constant"][2][0] == pytest.approx(-0.580578, abs=1e-6)
    # tokens per GPU from 64: 452.64 / 269.80 - 1 at 16, 226.32 / 156.98 - 1 at 32
    assert errs["tokens_per_gpu"][2][0] == pytest.approx(0.677687, abs=1e-6)
    assert worst(errs["tokens_per_gpu"]) == pytest.approx(0.677687, abs=1e-6)
    assert all(errs[r][c][c] == 0 for r in errs for c in range(3))


def test_model_that_saturates_cuts_the_error():
    # a model whose 64-GPU time is 113.16 / 67.45 of perfect scaling predicts it exactly
    errs = curve_errors(ASYNC, [4.0, 2.0, 113.16 / 67.45])
    assert errs["model"][0][2] == pytest.approx(0.0, abs=1e-9)


def test_bad_row_names_file_row_and_field(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text(
        "table,mode,trainer_gpus,update_actor_s\n"
        "7b-gpus,fully-async,16,269.80\n"
        "7b-gpus,fully-async,32,abc\n"
    )
    with pytest.raises(PhaseTableError, match=r"t\.csv: row 2: update_actor_s"):
        load_curves(p)
    p.write_text("table,mode,trainer_gpus,update_actor_s\n7b-gpus,fully-async,0,1\n")
    with pytest.raises(PhaseTableError, match=r"row 1: trainer_gpus"):
        load_curves(p)


def test_colocated_wait_grows_faster_than_fully_async():
    # GPU-seconds per step from 32 to 64 trainer GPUs: the colocated call cuts 16
    # mini-batches from partitions, fully-async's 4 are whole partitions (sp 4)
    def gpu_s(mode, n):
        return n * modelled_update_actor(SETUPS[mode], n)

    rise_async = gpu_s("fully-async", 64) / gpu_s("fully-async", 32)
    rise_colo = gpu_s("colocate-sync", 64) / gpu_s("colocate-sync", 32)
    assert 1.0 <= rise_async < 1.05 < rise_colo


def test_require_batches_sweep_is_read_with_its_setting():
    pts = load_curves(table="7b-require-batches")["fully-async"]
    assert [(p.trainer_gpus, p.require_batches, p.update_actor_s) for p in pts] == [
        (64, 1, 181.08),
        (64, 2, 128.08),
        (64, 4, 95.06),
    ]


def test_bad_require_batches_names_the_field(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text(
        "table,mode,trainer_gpus,update_actor_s,require_batches\n"
        "7b-gpus,fully-async,16,269.80,four\n"
    )
    with pytest.raises(PhaseTableError, match=r"row 1: require_batches"):
        load_curves(p)


def test_one_minibatch_call_balances_worse_than_four():
    # require_batches 1 partitions 512 sequences over 64 GPUs, 8 each: one long response
    # outweighs a partition's share; require_batches 4 gives 32 each
    rb1 = modelled_update_actor(Setup(32, 8), 64)
    rb4 = modelled_update_actor(Setup(128, 8), 64)
    assert rb1 > 1.1 * rb4


def test_dev_scripts_take_two_prompts_per_trainer_gpu_a_local_update():
    # required_samples = trainer GPUs x 32 / 16 prompts: 32, 64, 128 on 16, 32, 64 GPUs,
    # each 16 rollouts, cut into mini-batches of 32 prompts
    calls = [SCRIPTS_FULLY_ASYNC.imbalance(n) for n in (16, 32, 64)]
    assert [(c.sequences, c.mini_batches) for c in calls] == [(512, 1), (1024, 2), (2048, 4)]
    assert SETUPS["fully-async"].imbalance(16).sequences == 2048  # README: 4 x 32 prompts


def test_cli_bad_table_is_one_line(tmp_path):
    from rolloutlab.calibration.validation.trainer_scaling import main

    p = tmp_path / "t.csv"
    p.write_text("table,mode,trainer_gpus,update_actor_s\n7b-gpus,fully-async,16,-1\n")
    with pytest.raises(SystemExit, match=r"t\.csv: row 1: update_actor_s"):
        main(["--data", str(p), "--verl-setup", "scripts"])
