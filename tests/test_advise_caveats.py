"""What ``rolloutlab advise``'s answer rests on: one line per model assumption a
calibration did not measure (read from hand-made calibration files), and each chosen
knob against its runner-up, a tie within max(run-to-run spread, 1 %)."""

from __future__ import annotations

import copy
import json

import polars as pl
import pytest
from click.testing import CliRunner
from rolloutlab.analysis.advise.caveats import (
    Choice,
    assumptions,
    choices,
    neighbours,
    relative_spread,
)
from rolloutlab.analysis.figures.answers.comparisons import advise_answer
from rolloutlab.sim.scenario.scenario import load_scenario, scenario_from_dict

from rolloutlab.cli import main
from tests.cli_helpers import assert_refused

VERL_TB_LEARNING = {  # as `calibrate learning --verl-tb` writes it: the mean-field law
    "kappa": 9.4,
    "lr_ref": 1e-6,
    "eta_ref": 0.01,
    "reversal": 1.0,
    "theta_max": None,
    "b_noise": 0.0,
    "rho": 0.0,
    "advantage": "mean",
    "fit": {"method": "least squares of the mean-field reward curve", "steps": 105},
}
NOISE_LAW_LEARNING = {  # as `calibrate learning --real` on two (G, B) settings writes it
    **VERL_TB_LEARNING,
    "theta_max": 2.0,
    "b_noise": 40.0,
    "fit": {
        "settings": [{"G": 4, "B": 8}, {"G": 8, "B": 8}],
        "likelihood_ratio_vs_linear": {"statistic": 6.8, "p_value": 0.009},
    },
}
STEP_PHASES = {
    "reward": {
        "latency": {"kind": "uniform", "a": 0.98, "b": 39.2},
        "workers": 256,
        "overlap": "learner",
        "learner_overlap_share": 0.29,
        "adv_s": 0.55,
    },
    "periodic": [{"name": "testing", "every": 5, "seconds": 145.0}],
}
ASSUMED = {"reward_latency_shape": {"kind": "uniform", "a": 1.0, "b": 40.0}, "reward_workers": 256}


def calibration(learning=None, step_phases=None) -> dict:
    """The bundled gsm8k calibration (a verl-tb fit) with the given blocks instead of its
    own: a hand-made calibration file."""
    d = copy.deepcopy(load_scenario("gsm8k").source)
    d.pop("learning", None)
    d.pop("step_phases", None)
    if learning is not None:
        d["learning"] = copy.deepcopy(learning)
        d.setdefault("pass_rate", {"spec": "beta:0.24,0.1"})
    if step_phases is not None:
        d["step_phases"] = copy.deepcopy(step_phases)
        d.setdefault("provenance", {}).setdefault("assumptions", {}).update(ASSUMED)
    return d


def _lines(d: dict, lrs=(1e-6,), varied=frozenset({"prompts"}), use_target=True) -> list[str]:
    return assumptions(scenario_from_dict(d, "fixture.json"), tuple(lrs), set(varied), use_target)


def test_a_mean_field_fit_at_one_lr_leaves_lr_b_noise_saturation_and_eta_ref_assumed():
    lines = _lines(calibration(VERL_TB_LEARNING), lrs=(5e-7, 1e-6, 4e-6))
    assert len(lines) == 4
    lr, noise, cap, eta = lines
    assert lr.startswith("learning gain linear in lr") and "lr_ref = 1e-06 only" in lr
    assert "reach x4 of it" in lr and "top of the lr grid" in lr
    assert noise.startswith("progress per step independent of B") and "b_noise = 0" in noise
    assert cap.startswith("reward progress without saturation")
    assert eta.startswith("collapse margin") and "eta_ref = 0.01 at lr_ref = 1e-06" in eta


def test_a_fitted_noise_law_with_a_tested_capacity_at_the_fitted_lr_leaves_eta_ref_only():
    (line,) = _lines(calibration(NOISE_LAW_LEARNING), lrs=(1e-6,))
    assert "eta_ref" in line


def test_b_noise_matters_only_where_b_or_g_is_searched():
    lines = _lines(calibration(VERL_TB_LEARNING), varied={"workers", "lr"})
    assert not any("independent of B" in x for x in lines)
    assert any(
        "independent of B" in x
        for x in _lines(calibration(VERL_TB_LEARNING), varied={"controller"})
    )


def test_without_a_learning_block_the_objective_is_time_per_step_and_says_how_to_add_one():
    first, eta = _lines(calibration(), lrs=(5e-7, 4e-6), use_target=False)
    assert first.startswith("no learning block: the objective is time per step")
    assert "`rolloutlab calibrate learning`" in first and "eta_ref" in eta
    first, _ = _lines(calibration(VERL_TB_LEARNING), lrs=(4e-6,), use_target=False)
    assert first.startswith("no target reward") and "--target-reward" in first


def test_a_reward_phase_names_its_assumed_latency_law_and_workers():
    lines = _lines(calibration(step_phases=STEP_PHASES), use_target=False)
    assert lines[-1].startswith("reward latency law uniform(1, 40) s and 256 reward workers")


def test_neighbours_change_one_knob_at_a_time():
    best = {"workers": 8, "lr": 1e-6, "prompts": 512}
    got = neighbours(best, {"workers": (2, 4, 8), "lr": (1e-6, 4e-6)})
    assert got == [
        ("workers", {"workers": 2, "lr": 1e-6, "prompts": 512}),
        ("workers", {"workers": 4, "lr": 1e-6, "prompts": 512}),
        ("lr", {"workers": 8, "lr": 4e-6, "prompts": 512}),
    ]

    # one grid step down and up: the neighbours a polish round prices
    space = {"workers": (2, 4, 8, 16), "lr": (1e-6, 4e-6)}
    got = neighbours({**best, "workers": 4}, space, reach=1)
    assert [(k, s["workers"], s["lr"]) for k, s in got] == [
        ("workers", 2, 1e-6),
        ("workers", 8, 1e-6),
        ("lr", 4, 4e-6),
    ]


def test_relative_spread_is_the_sd_over_the_mean():
    # mean 100, deviations 0, +2, -2: sd (ddof 1) = sqrt(8 / 2) = 2
    assert relative_spread([100.0, 102.0, 98.0]) == pytest.approx(0.02)
    assert relative_spread([100.0, None]) is None  # one seed did not reach the target


def test_a_choice_is_a_tie_within_the_larger_of_the_spread_and_one_percent():
    best = {"workers": 8, "prompts": 512, "controller": "static:2", "lr": 1e-6}
    priced = [
        ("workers", {**best, "workers": 4}, 198.6),  # +0.2 %: a tie
        ("workers", {**best, "workers": 2}, 250.0),
        ("prompts", {**best, "prompts": 1024}, 297.3),  # +50 %: a choice
        ("controller", {**best, "controller": "static:5"}, 178.2),  # -10 %: beaten
        ("lr", {**best, "lr": 4e-6}, None),  # infeasible: no alternative
    ]
    got = {c.knob: c for c in choices(best, 198.2, priced, spread=0.001)}
    assert got["workers"].verdict == "tie" and got["workers"].runner_up == 4
    assert got["workers"].gap == pytest.approx(198.6 / 198.2 - 1)
    assert got["workers"].threshold == 0.01
    assert got["prompts"].verdict == "choice" and got["controller"].verdict == "beaten"
    assert got["lr"].verdict == "alone" and got["lr"].runner_up is None
    assert got["workers"].line() == "workers = 8: a tie with 4 (199 s, +0.2%)"
    assert got["prompts"].line() == "prompts = 512: chosen over 1024 (297 s, +50.0%)"
    assert got["lr"].line() == "lr = 1e-06: no feasible setting differs in lr alone"
    # a spread of 60 % makes the +50 % prompts choice a tie too
    wide = {c.knob: c for c in choices(best, 198.2, priced, spread=0.6)}
    assert wide["prompts"].verdict == "tie" and wide["prompts"].threshold == 0.6


def test_choice_round_trips_through_json():
    c = Choice("workers", 8, 4, 198.2, 198.6, 0.002, 0.01, "tie")
    assert Choice(**json.loads(json.dumps(c.to_dict()))) == c


TINY = (
    "advise --controller static:2,static:4 --prompts 4 --workers 1,2 --max-num-seqs 64 "
    "--pipeline sync --lr 1e-6,4e-6 --steps 10 --trials 4 --parallel-trials 4"
).split()


def test_advise_on_a_calibration_with_step_phases_names_the_way_out(tmp_path):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(calibration(step_phases=STEP_PHASES)))
    res = CliRunner().invoke(
        main,
        [
            *TINY,
            "--calibration",
            str(cal),
            "--pipeline",
            "sync,bounded:2",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert_refused(res, "--pipeline bounded:2", tmp_path / "o")
    assert "--without-step-phases" in res.output and "--pipeline sync" in res.output
    assert "docs/step_phases.md, 'Asynchronous pipelines'" in res.output


def test_advise_prints_its_assumptions_and_ties_and_the_report_shows_them(tmp_path):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(calibration(step_phases=STEP_PHASES)))
    out = tmp_path / "adv"
    args = [
        *TINY,
        "--calibration",
        str(cal),
        "--pipeline",
        "sync,bounded:2",
        "--without-step-phases",
    ]
    res = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "step phases are left out of every run" in res.output
    text = res.output[res.output.index("best:") :]
    assert "assumed, not measured by the scenario:" in text
    assert "no learning block: the objective is time per step" in text
    assert "reward latency law" not in text  # the phases were left out
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["step_phases"] == "left out (--without-step-phases)"
    caveats = cfg["caveats"]
    assert caveats["spread_seeds"] == 3
    # every searched knob (controller, workers, pipeline, lr) has its runner-up
    assert {c["knob"] for c in caveats["choices"]} == {"controller", "workers", "pipeline", "lr"}
    lr = next(c for c in caveats["choices"] if c["knob"] == "lr")
    # time per step does not depend on lr: where the other lr is feasible it is a tie
    assert lr["verdict"] in ("tie", "alone") and (lr["verdict"] == "alone" or lr["gap"] == 0)
    for line in caveats["lines"]:
        assert line in res.output
    notes = advise_answer(out, cfg).notes
    assert [n for n in notes if "tie when within" in n or "eta_ref" in n]
    assert set(line.strip() for line in caveats["lines"]) <= set(notes)
    trials = pl.read_csv(out / "trials.csv")
    # the polish's settings are trials (origin polish), the runners-up priced after it not
    assert trials.filter(pl.col("origin") == "search").height == 4
    assert trials.height == 4 + cfg["polish"]["trials"]
