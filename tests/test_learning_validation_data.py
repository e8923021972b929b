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
PLANS = {"corners": 45, "l_shape": 45}
"""Comparison folder -> runs it predicts: the corners fit predicts seeds 0-4 of all nine
settings, the L fit (seeds 0-4 of the L) the fresh seeds 5-9 of all nine (§5)."""
CASES = [(plan, t) for plan in PLANS for t in ("0.35", "0.38")]


def test_bundled_grid_has_every_run_whole():
    runs = pl.read_csv(HELDOUT / "runs.csv")
    assert runs["run"].n_unique() == 90  # 9 settings x 10 seeds
    assert runs.group_by("run").len()["len"].to_list() == [200] * 90
    per = runs.unique("run").group_by("G", "B").len()
    assert per.height == 9 and per["len"].to_list() == [10] * 9


@pytest.mark.parametrize(("plan", "target"), CASES)
def test_heldout_validation_measured_columns_follow_from_the_bundled_tables(plan, target):
    """results/learning_law_heldout (docs/learning.md §5): every run's measured steps and
    CPU time to the held-out target come from its evaluations and per-step CPU seconds."""
    runs = pl.read_csv(HELDOUT / "runs.csv")
    evals = pl.read_csv(HELDOUT / "evals.csv")
    table = pl.read_csv(HELDOUT / plan / f"target_{target}" / "learning_comparison.csv")
    assert table.height == PLANS[plan]
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


@pytest.mark.parametrize(("plan", "target"), CASES)
def test_heldout_validation_directions_follow_from_the_comparison(plan, target):
    from rolloutlab.analysis.learning.directions import direction_table

    runs = pl.read_csv(HELDOUT / "runs.csv").group_by("run").agg(pl.col("G", "B").first())
    folder = HELDOUT / plan / f"target_{target}"
    table = pl.read_csv(folder / "learning_comparison.csv").join(runs, on="run")
    bundled = pl.read_csv(folder / "learning_directions.csv")
    again = direction_table(table)
    assert bundled.height == again.height == 12
    for col in ("measured_change", "measured_se", "predicted_change"):
        assert bundled[col].to_numpy() == pytest.approx(again[col].to_numpy())
    assert bundled["agree"].to_list() == again["agree"].to_list()


@pytest.mark.parametrize(
    ("plan", "settings", "rho_fitted"),
    [("corners", [(4, 4), (16, 16)], False), ("l_shape", [(4, 4), (4, 16), (16, 4)], True)],
)
def test_heldout_fit_is_the_noise_law_on_its_declared_settings(plan, settings, rho_fitted):
    import json

    from rolloutlab.sim.models.learning import LearningParams

    fit = json.loads((HELDOUT / plan / "target_0.35" / "fit.json").read_text())
    p = LearningParams.from_dict(fit)
    assert p.b_noise > 0 and p.advantage == "std" and p.theta_max is not None
    assert [(s["G"], s["B"]) for s in fit["fit"]["settings"]] == settings
    assert fit["fit"]["loglik"] > fit["fit"]["loglik_mean_field"]
    assert fit["fit"].get("rho_fitted", False) is rho_fitted and (p.rho > 0) is rho_fitted
    if rho_fitted:
        assert fit["fit"]["loglik"] >= fit["fit"]["loglik_rho_0"]
        # the law on seeds 0-4 of the L, the step cost on seeds 5-9 of it (--cost-from)
        config = json.loads((HELDOUT / plan / "target_0.35" / "config.json").read_text())
        names = {Path(r).name for r in config["fit_runs"]}
        assert names == {f"g{g}_b{b}_s{s}" for g, b in settings for s in range(5)}
        cost = {Path(r).name for r in fit["cost_runs"]}
        assert cost == {f"g{g}_b{b}_s{s}" for g, b in settings for s in range(5, 10)}


@pytest.mark.parametrize(("target", "over", "worst"), [(0.35, 4, 0.944), (0.38, 3, 0.538)])
def test_two_five_seed_groups_of_one_setting_differ_as_docs_state(target, over, worst):
    """docs/learning.md §5 "the noise floor": steps to the held-out target, mean of seeds
    0-4 against seeds 5-9 of the same (G, B), from the bundled evaluations alone (a run that
    never reaches the target is left out of its group's mean)."""
    runs = pl.read_csv(HELDOUT / "runs.csv").unique("run").select("run", "G", "B", "seed")
    evals = pl.read_csv(HELDOUT / "evals.csv").filter(
        (pl.col("step") >= 0) & (pl.col("accuracy") >= target - 1e-9)
    )
    first = evals.group_by("run").agg((pl.col("step").min() + 1).alias("steps"))
    t = first.join(runs, on="run").with_columns((pl.col("seed") >= 5).alias("fresh"))
    m = (
        t.group_by("G", "B", "fresh")
        .agg(pl.col("steps").mean())
        .pivot(on="fresh", index=["G", "B"], values="steps")
    )
    gap = (m["true"] / m["false"] - 1).to_numpy()
    assert m.height == 9
    assert int((np.abs(gap) > 0.25).sum()) == over
    assert np.abs(gap).max() == pytest.approx(worst, abs=1e-3)
