"""bench/frameworks_three_loops.py and its scores (bench/three_loops_score.py), by hand."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

BENCH = Path(__file__).parents[1] / "bench"
sys.path.insert(0, str(BENCH))
try:
    import frameworks_three_loops as bench
    import three_loops_score as score
finally:
    sys.path.remove(str(BENCH))


def test_mdape_is_the_median_relative_error_over_known_steps():
    assert score.mdape([1.1, 0.8, 2.0, np.nan], [1.0, 1.0, 1.0, 1.0]) == pytest.approx(0.2)
    assert np.isnan(score.mdape([np.nan], [1.0]))


@given(
    st.lists(st.floats(0.01, 100.0), min_size=1, max_size=20),
    st.floats(0.1, 10.0),
)
def test_mdape_of_a_scaled_measurement_is_the_scale_off_one(meas, c):
    assert score.mdape(np.asarray(meas) * c, meas) == pytest.approx(abs(c - 1.0), rel=1e-9)


def _trace():
    """A four-step trace whose learner time is exactly 0.1 s + 1 ms per token and whose
    fit steps leave 0.5 s and 0.3 s to neither generation nor learner."""
    per_step = pl.DataFrame(
        {
            "step": [0, 1, 2, 3],
            "group_size": [2, 4, 4, 2],
            "measured_makespan_s": [1.0, 2.0, 3.2, 1.4],
            "predicted_makespan_s": [1.1, 1.9, 3.0, 1.5],
        }
    )
    # responses: step 0 sums 20 over 2 rollouts, step 1 100 over 4: mean 20 tokens
    rows = [
        (0, 10, 5), (0, 10, 15),
        (1, 10, 20), (1, 10, 20), (1, 10, 30), (1, 10, 30),
        (2, 10, 9), (2, 10, 9), (2, 10, 9), (2, 10, 9),
        (3, 12, 50), (3, 12, 50),
    ]  # fmt: skip
    rollouts = pl.DataFrame(rows, schema=["step", "prompt_tokens", "response_tokens"], orient="row")
    train = [0.1 + 0.001 * 40, 0.1 + 0.001 * 140, 0.3, 0.2]
    t_start = [0.0, 2.0, 10.0, 20.0]
    t_end = [0.0 + 1.0 + train[0] + 0.5, 2.0 + 2.0 + train[1] + 0.3, 13.5, 22.0]
    steps = pl.DataFrame(
        {"step": [0, 1, 2, 3], "t_start": t_start, "t_end": t_end, "train_time": train,
         "sync_time": [0.0] * 4}
    )  # fmt: skip
    return per_step, steps, rollouts


def test_step_time_is_drawn_makespan_plus_the_fitted_learner_plus_the_fit_steps_rest():
    per_step, steps, rollouts = _trace()
    t = score.step_times(per_step, steps, rollouts, 2)
    # step 2: 40 prompt tokens + 4 rollouts x 20 = 120 tokens -> 0.22 s; rest median(0.5, 0.3)
    # step 3: 24 + 2 x 20 = 64 tokens -> 0.164 s (its measured 100 response tokens unused)
    assert t["sim_step_s"].to_list()[2:] == pytest.approx([3.0 + 0.22 + 0.4, 1.5 + 0.164 + 0.4])
    assert t["measured_step_s"].to_list() == pytest.approx([1.64, 4.54 - 2.0, 3.5, 2.0])
    # constant: the fit steps of the same G (step 1 for G 4, step 0 for G 2)
    assert t["constant_step_s"].to_list()[2:] == pytest.approx([2.54, 1.64])
    assert t["persistence_step_s"].to_list()[1:] == pytest.approx([1.64, 2.54, 3.5])
    assert t["persistence_step_s"].is_nan().to_list()[0]


def test_constant_takes_every_fit_step_for_a_group_size_never_fitted():
    per_step, steps, rollouts = _trace()
    per_step = per_step.with_columns(pl.Series("group_size", [2, 4, 8, 2]))
    t = score.step_times(per_step, steps, rollouts, 2)
    assert t["constant_step_s"][2] == pytest.approx((1.64 + 2.54) / 2)


def test_step_times_needs_two_fit_steps_and_one_held_out():
    per_step, steps, rollouts = _trace()
    for k in (1, 4):
        with pytest.raises(ValueError, match="need 2 <= K"):
            score.step_times(per_step, steps, rollouts, k)


def _scored_tables():
    """compare idle's per-step table and step_times' table of a four-step run."""
    per_step = pl.DataFrame(
        {
            "step": [0, 1, 2, 3],
            "group_size": [8, 8, 4, 4],
            "measured_straggler": [True, False, True, False],
            "drawn_straggler_prob": [0.5, 0.5, 0.75, 0.25],
            "measured_makespan_s": [1.0, 1.5, 2.0, 4.0],
            "predicted_makespan_s": [1.0, 1.0, 2.2, 3.0],
            "replay_makespan_s": [1.0, 1.0, 2.0, 4.4],
            "constant_makespan_s": [1.0, 1.0, 1.0, 1.0],
            "persistence_makespan_s": [None, 1.0, 1.0, 2.0],
        }
    )
    times = pl.DataFrame(
        {
            "step": [0, 1, 2, 3],
            "measured_step_s": [2.0, 2.5, 3.0, 5.0],
            "sim_step_s": [2.0, 2.0, 3.3, 5.0],
            "constant_step_s": [2.0, 2.0, 2.0, 2.0],
            "persistence_step_s": [np.nan, 2.0, 2.0, 3.0],
        }
    )
    return per_step, times


def test_score_run_against_hand_counts():
    r = score.score_run(*_scored_tables(), 2)
    assert r["G"] == [8, 8, 4, 4] and r["held_out_steps"] == 2
    assert (r["fit_rate"], r["held_out_rate"]) == (0.5, 0.5)
    # linear: the line through (0, 1), (1, 0) is 1 - t: -1 and -2 at steps 2, 3, clipped to 0
    assert r["rate_pred"]["linear"] == 0.0
    assert r["rate_abs_error"] == {"sim": 0.0, "persistence": 0.0, "linear": 0.5}
    # Brier: ((0.75-1)^2 + 0.25^2) / 2, ((0.5-1)^2 + 0.5^2) / 2 and ((0-1)^2 + 0^2) / 2
    assert r["brier"] == pytest.approx({"sim": 0.0625, "persistence": 0.25, "linear": 0.5})
    # linear makespan: G 4 has no fit step, so all fit steps: 1 + 0.5 t -> 2.0, 2.5 against
    # 2.0, 4.0: errors 0 and 0.375
    assert r["makespan_mdape"] == pytest.approx(
        {"drawn": 0.175, "replay": 0.05, "constant": 0.625, "persistence": 0.5,
         "linear": 0.1875}
    )  # fmt: skip
    # linear step time: 2 + 0.5 t -> 3.0, 3.5 against 3.0, 5.0: errors 0 and 0.3
    assert r["step_mdape"] == pytest.approx(
        {"sim": 0.05, "constant": (1 / 3 + 0.6) / 2, "persistence": (1 / 3 + 0.4) / 2,
         "linear": 0.15}
    )  # fmt: skip


def test_linear_trend_fits_the_same_group_size_when_it_has_two_fit_steps():
    step = [0, 1, 2, 3, 4, 5]
    value = [1.0, 10.0, 3.0, 14.0, 0.0, 0.0]  # held-out values are never read
    G = [2, 4, 2, 8, 2, 8]
    # step 4 (G 2): the line through (0, 1), (2, 3) is 1 + t -> 5. Step 5 (G 8, one fit
    # step): all four fit steps, mean t 1.5, mean value 7, Sxy 16, Sxx 5: slope 3.2,
    # intercept 2.2 -> 18.2
    assert score.linear_trend(step, value, 4, G) == pytest.approx([5.0, 18.2])
    # without G every held-out step takes all fit steps: 2.2 + 3.2 t
    assert score.linear_trend(step, value, 4) == pytest.approx([15.0, 18.2])
    with pytest.raises(ValueError, match="need 2 <= K"):
        score.linear_trend(step, value, 1)


def _run(rate, makespans, steps_s):
    return {"held_out_rate": rate, "held_out_makespan_s": makespans, "held_out_step_s": steps_s}


def test_floor_is_the_seeds_against_each_other():
    runs = [_run(0.5, [1.0, 2.0], [1.0, 2.0]), _run(0.25, [2.0, 2.0], [2.0, 2.0])]
    runs.append(_run(1.0, [1.0, 2.0], [1.0, 2.0]))
    f = score.floor(runs)
    assert f["rate"] == pytest.approx((0.25 + 0.5 + 0.75) / 3)
    # ordered pairs (measured, predicting): (0, 1) median(1, 0) = 0.5, (1, 0) median(0.5, 0)
    # = 0.25, (0, 2) and (2, 0) 0, (2, 1) 0.5, (1, 2) 0.25: the median of the six is 0.25
    assert f["makespan"] == pytest.approx(0.25) and f["step"] == pytest.approx(0.25)
    assert np.isnan(score.floor(runs[:1])["rate"])


def test_beats_counts_seeds_strictly_below_every_rule():
    runs = [
        {"m": {"sim": 0.1, "constant": 0.2, "persistence": 0.3, "linear": 0.4}},
        {"m": {"sim": 0.2, "constant": 0.2, "persistence": 0.3, "linear": 0.4}},
        {"m": {"sim": 0.1, "constant": 0.2, "persistence": float("nan"), "linear": 0.15}},
        {"m": {"sim": 0.1, "constant": 0.2, "persistence": 0.3, "linear": 0.05}},
    ]
    assert score.beats(runs, "m", "sim", score.NAIVE) == "2 of 4"


def test_spread_is_mean_and_range():
    assert score.spread([0.1, 0.3, 0.2]) == "0.20 (0.10-0.30)"
    assert score.spread([0.5]) == "0.50"


def _args(tmp_path, **kw):
    base = {"steps": 32, "prompts": 4, "max_group_size": 8, "tau": 2.0, "warm_start_steps": 3}
    return SimpleNamespace(**{**base, **kw})


def test_warm_start_line_says_cached_only_when_the_key_matches(tmp_path):
    from rolloutlab.real.policy.model import load_config
    from rolloutlab.real.policy.warmstart import key_hash, warm_start_key

    cfg = bench.sync_config("static:4", 0, _args(tmp_path))
    assert "not cached; training 3 supervised steps" in bench.warm_start_line(cfg, tmp_path)
    assert "not cached" in bench.warm_start_line(cfg, None)
    ops = cfg.task_ops
    exclude = frozenset(p.prompt_text for p in ops.heldout(bench.EVAL_SIZE))
    key = warm_start_key(load_config(), ops, cfg.warm_start, exclude)
    entry = tmp_path / key_hash(key)
    entry.mkdir()
    (entry / "warmstart.json").write_text(json.dumps({"key": {**key, "task": "other"}}))
    assert "not cached" in bench.warm_start_line(cfg, tmp_path)
    (entry / "warmstart.json").write_text(json.dumps({"key": key}))
    assert bench.warm_start_line(cfg, tmp_path).startswith("warm start: cached")


def test_an_existing_out_is_refused_and_left_alone(tmp_path):
    (tmp_path / "summary.md").write_text("earlier result")
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(["--out", str(tmp_path)])
    assert exc.value.code == 2
    assert (tmp_path / "summary.md").read_text() == "earlier result"


def test_settings_default_to_one_seed_half_the_steps_and_refuse_no_held_out_step(tmp_path):
    a = bench.parse_args(["--out", str(tmp_path / "o"), "--steps", "12"])
    assert (a.seed, a.fit_steps, a.controller) == ([0], 6, ["sagc:candidates=4/8/16"])
    a = bench.parse_args(["--out", str(tmp_path / "o"), "--seed", "1", "--seed", "2"])
    assert a.seed == [1, 2]
    with pytest.raises(SystemExit):
        bench.parse_args(["--out", str(tmp_path / "o"), "--steps", "8", "--fit-steps", "8"])


def test_folder_names_of_controller_specs():
    assert bench.label("sagc:candidates=2/4/8,eta_lambda=1") == "sagc_candidates_2_4_8_eta_lambda_1"


def test_rescore_scores_the_kept_tables_again_and_keeps_the_measured_fields(tmp_path):
    per_step, times = _scored_tables()
    ctl = "sagc:candidates=2/4/8"
    run_dir = tmp_path / "src" / bench.label(ctl) / "seed3"
    kept = {"compare_groups": {"skipped": "G changed"}, "response_tokens_mean": 9.5,
            "wall_s": 12.0, "load_1min": [0.5, 1.0]}  # fmt: skip
    for loop in ("rolloutlab", "trl"):
        (run_dir / f"idle_{loop}").mkdir(parents=True)
        per_step.write_csv(run_dir / f"idle_{loop}" / "idle_comparison.csv")
        times.write_csv(run_dir / f"step_times_{loop}.csv")
    old = {"controller": ctl, "seed": 3, "rolloutlab": {**kept, "brier": {}}, "trl": kept}
    doc = {"args": {"fit_steps": "2", "steps": "4"}, "runs": [old]}
    (tmp_path / "src" / "three_loops.json").write_text(json.dumps(doc))
    md = bench.rescore(tmp_path / "src", tmp_path / "out")
    new = json.loads((tmp_path / "out" / "three_loops.json").read_text())["runs"][0]
    for loop in ("rolloutlab", "trl"):
        assert new[loop]["brier"] == pytest.approx(
            {"sim": 0.0625, "persistence": 0.25, "linear": 0.5}
        )
        assert new[loop]["step_mdape"]["linear"] == pytest.approx(0.15)
        assert {k: new[loop][k] for k in kept} == kept
    assert "0.062 / 0.250 / 0.500" in md
    with pytest.raises(FileExistsError):
        bench.rescore(tmp_path / "src", tmp_path / "out")
