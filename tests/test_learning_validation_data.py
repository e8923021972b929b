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


HELDOUT = DATA.parent / "learning_law_heldout"


@pytest.mark.parametrize("target", ["0.35", "0.38"])
def test_heldout_validation_measured_columns_follow_from_the_bundled_tables(target):
    """results/learning_law_heldout (docs/learning.md §5): every run's measured steps and
    CPU time to the held-out target come from its evaluations and per-step CPU seconds."""
    runs = pl.read_csv(HELDOUT / "runs.csv")
    evals = pl.read_csv(HELDOUT / "evals.csv")
    table = pl.read_csv(HELDOUT / f"target_{target}" / "learning_comparison.csv")
    assert table.height == 45 and runs["run"].n_unique() == 45
    assert runs.group_by("run").len()["len"].to_list() == [200] * 45
    for row in table.iter_rows(named=True):
        e = evals.filter((pl.col("run") == row["run"]) & (pl.col("step") >= 0)).sort("step")
        hit = e.filter(pl.col("accuracy") >= float(target) - 1e-9)
        if hit.height == 0:
            assert row["measured_steps_to_target"] is None
            continue
        step = int(hit["step"][0]) + 1
        assert step == row["measured_steps_to_target"]
        r = runs.filter(pl.col("run") == row["run"]).sort("step")
        cpu = (r["cpu_gen_s"] + r["cpu_train_s"] + r["cpu_sync_s"]).cum_sum()[step - 1]
        assert cpu == pytest.approx(row["measured_time_to_target_s"], abs=1e-3)


@pytest.mark.parametrize("target", ["0.35", "0.38"])
def test_heldout_validation_directions_follow_from_the_comparison(target):
    from rolloutlab.analysis.learning_directions import direction_table

    runs = pl.read_csv(HELDOUT / "runs.csv").group_by("run").agg(pl.col("G", "B").first())
    table = pl.read_csv(HELDOUT / f"target_{target}" / "learning_comparison.csv").join(
        runs, on="run"
    )
    bundled = pl.read_csv(HELDOUT / f"target_{target}" / "learning_directions.csv")
    again = direction_table(table)
    assert bundled.height == again.height == 12
    for col in ("measured_change", "measured_se", "predicted_change"):
        assert bundled[col].to_numpy() == pytest.approx(again[col].to_numpy())
    assert bundled["agree"].to_list() == again["agree"].to_list()


def test_heldout_fit_is_the_noise_law_on_the_two_corner_settings():
    import json

    from rolloutlab.sim.models.learning import LearningParams

    fit = json.loads((HELDOUT / "target_0.35" / "fit.json").read_text())
    p = LearningParams.from_dict(fit)
    assert p.b_noise > 0 and p.advantage == "std" and p.theta_max is not None
    assert fit["fit"]["settings"] == [{"G": 4, "B": 4}, {"G": 16, "B": 16}]
    assert fit["fit"]["loglik"] > fit["fit"]["loglik_mean_field"]
