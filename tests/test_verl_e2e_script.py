"""bench/verl_group_size_e2e.py on CPU without verl: the dataset it writes, the hydra
overrides of ``--dry-run``, its reward and its per-step GRPO check (the verl run itself
needs a GPU: bench/gpu_validation.sh)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
import torch

_PATH = Path(__file__).resolve().parents[1] / "bench" / "verl_group_size_e2e.py"
_SPEC = importlib.util.spec_from_file_location("verl_group_size_e2e", _PATH)
e2e = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(e2e)


def test_dry_run_writes_verl_data_and_prints_the_overrides(tmp_path, capsys):
    out = tmp_path / "run"
    rc = e2e.main(
        ["--model", "m", "--out", str(out), "--steps", "3", "--prompts", "4", "--dry-run"]
    )
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    assert "algorithm.adv_estimator=grpo" in lines
    assert "trainer.use_v1=False" in lines  # the legacy RayPPOTrainer the mixin subclasses
    assert "data.train_batch_size=4" in lines and "trainer.total_training_steps=3" in lines
    assert f"reward.custom_reward_function.path={_PATH}" in lines
    assert len({x.split("=")[0] for x in lines}) == len(lines)  # no key given twice
    train = pl.read_parquet(out / "data" / "train.parquet")
    assert train.height == 12 and pl.read_parquet(out / "data" / "val.parquet").height == 4
    row = train.row(0, named=True)
    assert row["prompt"][0]["role"] == "user" and "The answer is N" in row["prompt"][0]["content"]
    assert int(row["reward_model"]["ground_truth"]) >= 0


def test_reward_is_the_final_number_against_the_ground_truth():
    assert e2e.compute_score("s", "So 12 + 7 = 19. The answer is 19.", "19") == 1.0
    assert e2e.compute_score("s", "The answer is 18. Or 19.", "19") == 0.0
    assert e2e.compute_score("s", "no number", "19") == 0.0


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--steps", "1"], "--steps must be >= 2"),
        (["--prompts", "3", "--micro-batch", "4"], "not a multiple of --micro-batch 4"),
    ],
)
def test_bad_arguments_are_refused_with_the_rule(argv, msg, capsys):
    with pytest.raises(SystemExit):
        e2e.parse_args(["--model", "m", "--out", "o", *argv])
    assert msg in capsys.readouterr().err


def batch(scores, uids, adv_first):
    n = len(scores)
    rew = torch.zeros(n, 3)
    rew[:, -1] = torch.tensor(scores)
    adv = torch.zeros(n, 3)
    adv[:, 0] = torch.tensor(adv_first)
    return SimpleNamespace(
        batch={"token_level_rewards": rew, "advantages": adv},
        non_tensor_batch={"uid": np.array(uids, dtype=object)},
    )


def test_step_check_accepts_grpo_advantages_and_catches_pooled_ones():
    # two groups of 2, rewards (1, 0) and (1, 1): GRPO gives +-1/sqrt(2) and 0, 0
    h = 1 / np.sqrt(2)
    good = e2e.step_check(batch([1, 0, 1, 1], ["a", "a", "b", "b"], [h, -h, 0, 0]), G=2, B=2)
    assert good["sizes_ok"] and good["advantage_max_abs_err"] < 1e-4
    # normalised over the whole batch instead (mean 0.75): not grouped by uid
    pooled = e2e.step_check(batch([1, 0, 1, 1], ["a", "a", "b", "b"], [0.5, -1.5, 0.5, 0.5]), 2, 2)
    assert pooled["advantage_max_abs_err"] > 0.1
    assert not e2e.step_check(batch([1, 0, 1], ["a", "a", "b"], [h, -h, 0]), G=2, B=2)["sizes_ok"]


def test_a_finished_run_is_not_overwritten(tmp_path):
    (tmp_path / "checks.json").write_text("{}")
    with pytest.raises(SystemExit, match="holds a finished run"):
        e2e.main(["--model", "m", "--out", str(tmp_path), "--dry-run"])
