"""The bundled learning-law validation (results/learning_law, docs/learning.md §5): the
measured columns of the comparison follow from the bundled per-step run table."""

from pathlib import Path

import numpy as np
import polars as pl
import pytest

DATA = Path(__file__).resolve().parents[1] / "results" / "learning_law"


def test_measured_steps_and_cpu_time_to_target_follow_from_the_run_table():
    runs = pl.read_csv(DATA / "runs.csv")
    table = pl.read_csv(DATA / "learning_comparison.csv")
    assert table.height == 18 and runs["run"].n_unique() == 18
    for row in table.iter_rows(named=True):
        r = runs.filter(pl.col("run") == row["run"]).sort("step")
        trail = np.convolve(r["reward_mean"].to_numpy(), np.ones(10) / 10, mode="valid")
        step = int(np.argmax(trail >= 0.30 - 1e-12)) + 10  # 1-based step ending the window
        assert trail.max() >= 0.30 and step == row["measured_steps_to_target"]
        cpu = (r["cpu_gen_s"] + r["cpu_train_s"] + r["cpu_sync_s"]).cum_sum()[step - 1]
        assert cpu == pytest.approx(row["measured_time_to_target_s"], abs=1e-3)


def test_fit_block_loads_as_the_noise_law():
    import json

    from rolloutlab.sim.models.learning import LearningParams

    fit = json.loads((DATA / "fit.json").read_text())
    p = LearningParams.from_dict(fit)
    assert p.b_noise > 0 and p.advantage == "std"
    assert len(fit["fit"]["settings"]) == 3
