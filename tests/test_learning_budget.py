"""The learning-budget study (analysis/learning/budget.py, `rolloutlab compare learning-budget`)."""

import polars as pl
import pytest
from click.testing import CliRunner
from rolloutlab.analysis.learning.budget import budget_study, budget_summary
from rolloutlab.sim.models.learning import LearningParams

from rolloutlab.cli import main


def test_summary_by_hand():
    t = pl.DataFrame({"budget": [8, 8, 8], "G": [2, 4, 16], "reward_mean": [0.6, 0.7, 0.8],
                      "initial_reward": [0.5] * 3})  # fmt: skip
    s = budget_summary(t).row(0, named=True)
    assert s["best_G"] == 16 and s["g2_share_of_g16"] == pytest.approx(0.75)
    assert s["g2_share_of_g16_gain"] == pytest.approx(0.1 / 0.3)


def test_no_learning_gives_the_initial_reward_and_more_budget_helps():
    frozen = budget_study(LearningParams(kappa=0.0), (1.0, 1.0), [256], [2, 8], 8, draws=200)
    assert frozen["reward_mean"].to_list() == pytest.approx([0.5, 0.5], abs=0.03)
    p = LearningParams(kappa=2.0, b_noise=32.0)
    t = budget_study(p, (1.0, 1.0), [256, 2048], [4], 8, draws=64)
    assert t["steps"].to_list() == [8, 64]
    assert t["reward_mean"][1] > t["reward_mean"][0]


def test_cli_writes_tables_and_refuses_a_budget_below_one_step(tmp_path):
    args = ["compare", "learning-budget", "--budgets", "256,512", "--group-size", "2,16",
            "--prompts", "8", "--draws", "8", "--b-noise", "64", "--out", str(tmp_path / "o")]  # fmt: skip
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert (tmp_path / "o" / "budget_summary.csv").exists()
    r = CliRunner().invoke(main, [*args[:3], "64", *args[4:-1], str(tmp_path / "bad")])
    assert r.exit_code == 2 and "below one step of G=16" in r.output
    assert not (tmp_path / "bad").exists()
