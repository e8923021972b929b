"""`rolloutlab compare learning` on small synthetic real-run directories (no torch)."""

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from rolloutlab.analysis.learning.compare import compare_learning
from rolloutlab.analysis.learning.step_cost import cost_model
from rolloutlab.analysis.learning.step_cost_law import fit_law, predict_setting, read_steps
from rolloutlab.calibration.fits.learning_fit import simulate_curve
from rolloutlab.calibration.readers.run_curve import read_run
from rolloutlab.sim.trace import schema as trace

from rolloutlab.cli import main

# the same synthetic fit runs are fitted once per session (conftest.py says why)
pytestmark = pytest.mark.usefixtures("memoized_learning_fits")

COLUMNS = ["run", "controller", "measured_time_to_target_s", "predicted_time_to_target_s",
           "rel_error", "measured_rank", "predicted_rank", "seed", "group",
           "measured_steps_to_target", "predicted_steps_to_target", "predicted_sd_s",
           "predicted_reached_frac", "mean_field_time_to_target_s",
           "constant_steps_time_to_target_s", "constant_rel_error"]  # fmt: skip


def write_synthetic_run(
    d,
    G,
    seed,
    task="graph-walk",
    controller=None,
    lr=1e-6,
    cpu=True,
    T=40,
    cpu_scale=1.0,
    capacity=None,
):
    """A real-run directory (trace v2 with `correct`, learner/eval JSONL, config) whose
    group counts come from the learning model itself; every step takes 1 s (wall) and
    ``cpu_scale`` x (0.01 G + 0.05) CPU s."""
    curve = simulate_curve(2.0, 0.8, 0.6, G=G, B=16, T=T, lr=1e-6, seed=seed, dynamic_sampling=True)
    d.mkdir()
    rows, steps, learner = [], [], []
    for t, k in enumerate(curve.counts):
        for i, ki in enumerate(k):
            for j in range(G):
                rows.append(dict(run_id="r", step=t, prompt_id=t * 16 + i, sample_idx=j, group_size=G,
                                 policy_version=t, learner_version=t, prompt_tokens=5, response_tokens=10,
                                 finish_reason="stop", worker=0, t_submit=float(t), t_first_token=t + 0.1,
                                 t_finish=t + 0.5, reward=float(j < ki), correct=bool(j < ki)))  # fmt: skip
        acc = float(k.sum() / (16 * G))
        steps.append(dict(run_id="r", step=t, t_start=float(t), t_end=t + 1.0, gen_time=0.5,
                          train_time=0.4, sync_time=0.1, lr=1e-6, reward_mean=acc,
                          controller_state="{}"))  # fmt: skip
        learner.append({"step": t, "t_s": t + 1.0, "G": G, "reward_mean": acc}
                       | ({"cpu_gen_s": 0.01 * G * cpu_scale, "cpu_train_s": 0.0,
                           "cpu_sync_s": 0.05 * cpu_scale} if cpu else {}))  # fmt: skip
    trace.write_parquet(pl.DataFrame(rows, schema=trace.ROLLOUT_SCHEMA), d / "rollouts.parquet", "rollouts")  # fmt: skip
    trace.write_parquet(pl.DataFrame(steps, schema=trace.STEP_SCHEMA), d / "steps.parquet", "steps")
    cfg = {"task_name": task, "controller": controller or f"static:{G}", "seed": seed,
           "dynamic_sampling": True, "learner": {"lr": lr}}  # fmt: skip
    if capacity is not None:  # a real sync run's engine slots and prompt batch
        cfg |= {"capacity": capacity, "prompts": 16}
    (d / "config.json").write_text(json.dumps({"config": cfg}))
    (d / "learner.jsonl").write_text("\n".join(json.dumps(x) for x in learner))
    (d / "eval.jsonl").write_text(json.dumps({"step": -1, "t_s": 0.0, "accuracy": 0.5}))


def test_the_fit_run_predicts_its_own_clock_and_runs_are_ranked(tmp_path):
    write_synthetic_run(tmp_path / "fit", 8, 0)
    write_synthetic_run(tmp_path / "g4", 4, 1)
    write_synthetic_run(tmp_path / "g16", 16, 2)
    c0, c1 = cost_model(
        trace.read(tmp_path / "fit" / "steps.parquet", "steps"), read_run(tmp_path / "fit")
    )
    assert (c0, c1) == pytest.approx((0.1, 0.9 / (16 * 8)))  # 1 s per step, nothing between
    table, groups, curves, fit = compare_learning(
        tmp_path / "fit", [tmp_path / "fit", tmp_path / "g4", tmp_path / "g16"], 0.7, "linear", 20
    )
    assert table.columns == COLUMNS
    measured, predicted = curves["fit"]
    assert predicted["t_end"].to_list() == pytest.approx(measured["t_end"].to_list())
    g16 = curves["g16"][1]["t_end"].to_numpy()
    assert np.diff(g16) == pytest.approx(0.1 + 0.9 * 2)  # twice the fit run's rollouts per step
    assert sorted(table["predicted_rank"].to_list()) == [1, 2, 3]
    assert abs(fit["kappa"] - 2.0) < 1.0
    # the naive rule "the fit run's steps, on each run's predicted clock": on the fit run
    # itself that is its own measured time exactly
    own = table.filter(pl.col("run") == "fit").row(0, named=True)
    assert fit["constant_steps_to_target"] == own["measured_steps_to_target"]
    assert own["constant_rel_error"] == pytest.approx(0.0, abs=1e-12)
    g16_row = table.filter(pl.col("run") == "g16").row(0, named=True)
    steps = own["measured_steps_to_target"]
    assert g16_row["constant_steps_time_to_target_s"] == pytest.approx(steps * (0.1 + 0.9 * 2))


def test_cli_writes_the_csv_and_refuses_mixed_tasks_or_a_bad_target(tmp_path):
    write_synthetic_run(tmp_path / "fit", 8, 0)
    write_synthetic_run(tmp_path / "other", 4, 1, task="digit-chain")
    write_synthetic_run(tmp_path / "g4", 4, 1)
    base = ["compare", "learning", "--learning-model", "linear", "--draws", "5", "--fit",
            str(tmp_path / "fit"), "--out"]  # fmt: skip
    res = CliRunner().invoke(main, [*base, str(tmp_path / "o1"), "--real", str(tmp_path / "g4"),
                                    "--target-accuracy", "0.7"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert pl.read_csv(tmp_path / "o1" / "learning_comparison.csv").columns == COLUMNS
    assert (tmp_path / "o1" / "learning_comparison.png").exists()
    # and `rolloutlab report` turns it into a page with its table, intro and figure
    res = CliRunner().invoke(main, ["report", str(tmp_path / "o1"), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    page = next((tmp_path / "r").glob("*.html")).read_text()
    assert "compare-learning" in page and "learning_comparison.csv" in page
    assert "predicted time to target (s)" in page and "data:image/png;base64," in page
    assert "learning_comparison_by_controller.csv" in page and "measured sd (s)" in page
    for extra, msg in (
        (["--real", str(tmp_path / "other"), "--target-accuracy", "0.7"], "different tasks"),
        (
            ["--real", str(tmp_path / "g4"), "--target-accuracy", "1.5"],
            "1.5 is not in the range 0.0<x<=1.0",
        ),
    ):
        res = CliRunner().invoke(main, [*base, str(tmp_path / "o2"), *extra])
        assert res.exit_code == 2 and msg in res.output
        assert not (tmp_path / "o2").exists()


def test_seeds_of_one_controller_form_one_group_and_the_cpu_clock(tmp_path):
    for name, G, seed in (("a0", 8, 0), ("a1", 8, 1), ("b0", 4, 0), ("b1", 4, 1)):
        write_synthetic_run(tmp_path / name, G, seed, T=20)
    write_synthetic_run(
        tmp_path / "c0", 8, 2, lr=2e-6, T=20
    )  # static:8 with another lr: its own group
    dirs = [tmp_path / n for n in ("a0", "b0", "a1", "b1", "c0")]
    fit_on = [dirs[0], dirs[2]]  # both static:8 seeds, fitted jointly
    table, groups, _, fit = compare_learning(fit_on, dirs, 0.7, "linear", 10, clock="cpu")
    assert fit["fit"]["runs"] == 2
    assert table["group"].to_list() == [
        "static:8 lr=1e-06", "static:4", "static:8 lr=1e-06", "static:4", "static:8 lr=2e-06"
    ]  # fmt: skip
    assert groups["controller"].to_list() == ["static:8 lr=1e-06", "static:4", "static:8 lr=2e-06"]
    assert groups["runs"].to_list() == [2, 2, 1]
    # cpu clock: 0.01 G + 0.05 s per step, so the fit run's steps take 0.13 s each
    assert fit["clock"] == "cpu" and fit["cost_c1_s_per_rollout"] == pytest.approx(0.01 / 16)
    a = table.filter(pl.col("run").is_in(["a0", "a1"]))
    meas = a["measured_time_to_target_s"].to_numpy()
    g = groups.row(0, named=True)
    assert g["measured_mean_s"] == pytest.approx(meas.mean())
    assert g["measured_sd_s"] == pytest.approx(meas.std(ddof=1))
    assert (a["measured_steps_to_target"].to_numpy() * 0.13) == pytest.approx(meas)
    # a run without the CPU fields is refused by name
    write_synthetic_run(tmp_path / "old", 8, 3, cpu=False, T=20)
    with pytest.raises(ValueError, match="old.*cpu_gen_s"):
        compare_learning(dirs[0], [tmp_path / "old"], 0.7, "linear", 2, clock="cpu")


def test_cost_from_other_runs_prices_the_steps_with_their_clock(tmp_path):
    """--cost-from: the law is fitted on --fit, the step cost on the given runs (a machine
    twice as slow doubles every predicted CPU time, steps unchanged); a cost run without
    the CPU fields is refused by name, by the CLI in one line."""
    write_synthetic_run(tmp_path / "fit", 8, 0, T=20)
    write_synthetic_run(tmp_path / "slow", 8, 0, T=20, cpu_scale=2.0)
    write_synthetic_run(tmp_path / "g4", 4, 1, T=20)
    args = (tmp_path / "fit", [tmp_path / "g4"], 0.7, "linear", 10)
    base, _, _, f0 = compare_learning(*args, clock="cpu")
    slow, _, _, f1 = compare_learning(*args, clock="cpu", cost_dirs=[tmp_path / "slow"])
    assert f1["cost_runs"] == [str(tmp_path / "slow")] and f0["cost_runs"] == [
        str(tmp_path / "fit")
    ]
    assert f1["kappa"] == f0["kappa"]  # the law is the --fit runs'
    assert f1["cost_c1_s_per_rollout"] == pytest.approx(2 * f0["cost_c1_s_per_rollout"])
    assert (
        base["predicted_steps_to_target"].to_list() == slow["predicted_steps_to_target"].to_list()
    )
    t0, t1 = base["predicted_time_to_target_s"][0], slow["predicted_time_to_target_s"][0]
    assert t0 is not None and t1 == pytest.approx(2 * t0)
    write_synthetic_run(tmp_path / "old", 8, 3, cpu=False, T=20)
    r = CliRunner().invoke(main, ["compare", "learning", "--fit", str(tmp_path / "fit"),
                                  "--real", str(tmp_path / "g4"), "--cost-from", str(tmp_path / "old"),
                                  "--clock", "cpu", "--target-accuracy", "0.7", "--draws", "5",
                                  "--out", str(tmp_path / "o")])  # fmt: skip
    assert r.exit_code == 2 and "old" in r.output and "cpu_gen_s" in r.output
    # a --real run beyond the cost runs' rollouts (G = 16 x 16 against 8 x 16) is noted
    write_synthetic_run(tmp_path / "g16", 16, 4, T=20)
    for real, noted in (("g4", False), ("g16", True)):
        r = CliRunner().invoke(main, ["compare", "learning", "--fit", str(tmp_path / "fit"),
                                      "--real", str(tmp_path / real), "--target-accuracy", "0.7",
                                      "--draws", "5", "--out", str(tmp_path / f"x_{real}")])  # fmt: skip
        assert r.exit_code == 0, r.output
        assert ("priced by extrapolation" in r.output) is noted
        assert ("g16: up to 256 rollouts a step" in r.output) is noted


def test_group_table_by_hand():
    from rolloutlab.analysis.learning.seeds import GROUP_COLUMNS, group_table

    runs = pl.DataFrame(
        {
            "group": ["x", "x", "x", "y", "y", "z"],
            "measured_time_to_target_s": [10.0, 12.0, None, 30.0, 34.0, None],
            "predicted_time_to_target_s": [13.0, 13.0, 13.0, 31.0, 33.0, 5.0],
            "measured_steps_to_target": [5, 7, None, 9, 11, None],
            "predicted_steps_to_target": [6, 6, 6, 10, 10, 2],
        }
    )
    g = group_table(runs)
    assert g.columns == GROUP_COLUMNS
    x, y, z = g.rows(named=True)
    assert (x["runs"], x["reached"]) == (3, 2)
    assert x["measured_mean_s"] == 11 and x["measured_sd_s"] == pytest.approx(2**0.5)
    assert x["predicted_mean_s"] == 13 and x["rel_error"] == pytest.approx(13 / 11 - 1)
    assert x["error_within_spread"] is False  # |13 - 11| = 2 > sd 1.41
    assert y["error_within_spread"] is True  # |32 - 32| < sd 2.83
    assert x["measured_steps_mean"] == 6 and y["predicted_steps_mean"] == 10
    assert z["measured_mean_s"] is None and z["predicted_mean_s"] is None
    assert (x["measured_rank"], y["measured_rank"], z["measured_rank"]) == (1, 2, 3)
    assert (x["predicted_rank"], y["predicted_rank"], z["predicted_rank"]) == (1, 2, 3)


def test_resimulated_controller_chooses_its_own_G(tmp_path):
    """--resimulate: an adaptive run is predicted with its controller choosing G in the
    drawn runs (static runs get no resim_* values); LAGC at its defaults moves G."""
    write_synthetic_run(tmp_path / "fit", 8, 0, T=20)
    write_synthetic_run(tmp_path / "ad", 8, 1, controller="lagc", T=20)
    write_synthetic_run(tmp_path / "st", 4, 2, T=20)
    table, groups, _, _ = compare_learning(
        tmp_path / "fit", [tmp_path / "ad", tmp_path / "st"], 0.7, "linear", 5, resim_draws=3
    )
    ad, st = table.rows(named=True)
    assert st["resim_mean_G"] is None and st["resim_time_to_target_s"] is None
    assert ad["resim_mean_G"] is not None and ad["resim_mean_G"] != 8.0
    assert {"resim_mean_s", "resim_rel_error"} <= set(groups.columns)


def test_the_mechanism_cost_law_prices_each_run_at_its_setting(tmp_path):
    """--cost-law mechanism: a step of the predicted run costs the step-cost law's mean
    over draws from the priced runs at the run's (G, B) and engine slots; refused on the
    wall clock, with --resimulate, and for a run whose config has no capacity."""
    write_synthetic_run(tmp_path / "fit", 8, 0, T=20, capacity=64)
    write_synthetic_run(tmp_path / "g4", 4, 1, T=20, capacity=16)
    args = (tmp_path / "fit", [tmp_path / "g4"], 0.7, "linear", 10)
    table, _, curves, fit = compare_learning(*args, clock="cpu", cost_law="mechanism")
    law = fit_law([read_steps(tmp_path / "fit")])
    step_s = predict_setting(law, [read_steps(tmp_path / "fit")], 4, 16, 20, 16, 20, 0)
    assert fit["cost_law"] == "mechanism" and fit["cost_law_coefficients"]["gen"] == law.gen
    assert curves["g4"][1]["t_end"].to_numpy() == pytest.approx(step_s * np.arange(1, 21))
    row = table.row(0, named=True)
    if row["predicted_steps_to_target"] is not None:
        want = step_s * row["predicted_steps_to_target"]
        assert row["predicted_time_to_target_s"] == pytest.approx(want)
    with pytest.raises(ValueError, match="--clock cpu"):
        compare_learning(*args, clock="wall", cost_law="mechanism")
    with pytest.raises(ValueError, match="--resimulate"):
        compare_learning(*args, clock="cpu", cost_law="mechanism", resim_draws=2)
    write_synthetic_run(tmp_path / "old", 4, 2, T=20)
    with pytest.raises(ValueError, match="old/config.json: no capacity"):
        compare_learning(tmp_path / "fit", [tmp_path / "old"], 0.7, "linear", 2, clock="cpu",
                         cost_law="mechanism")  # fmt: skip
