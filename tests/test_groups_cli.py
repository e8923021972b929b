"""``rolloutlab calibrate groups`` / ``compare groups`` on the fixtures, and bad input
(one line naming file, line and field; exit 2; nothing written)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from rolloutlab.calibration.scenarios import groups as groups_scenario
from rolloutlab.calibration.scenarios.groups import merge_existing
from rolloutlab.calibration.validation.groups import COLUMNS
from rolloutlab.sim.scenario.scenario import load_scenario

from rolloutlab.cli import main

DATA = Path(__file__).parent / "data" / "groups"
REAL = DATA / "real_sync" / "rollouts.parquet"
MATH = DATA / "math_cot_100_lengths.jsonl"


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_calibrate_groups_writes_loadable_scenarios(tmp_path):
    out = tmp_path / "math.json"
    r = _run("calibrate", "groups", MATH, "--lengths-field", "response_chars", "--out", out)
    assert r.exit_code == 0, r.output
    sc = load_scenario(out)
    d = json.loads(out.read_text())
    fit = d["fit"]["lengths"]
    assert sc.lengths.sigma_prompt == fit["sigma_prompt"] and fit["n_samples"] == 800
    # the bundled ICC (0.757, ANOVA on the same lengths) lies within 2 SE of the ML fit
    assert abs(fit["icc"] - 0.757) <= 2 * fit["se"]["icc"]
    assert d["provenance"]["length_unit"] == "numbers of field 'response_chars', unit as given"
    assert d["provenance"]["sources"][0]["path"].endswith("math_cot_100_lengths.jsonl")
    emp = tmp_path / "real.json"
    r = _run("calibrate", "groups", REAL, "--out", emp, "--length-model", "empirical")
    assert r.exit_code == 0, r.output
    lengths = load_scenario(emp).lengths
    assert lengths.replace is False and len(lengths.groups) == 640
    assert lengths.max_response_length == 72  # from finish_reason == "length"


def test_validate_groups_writes_table_and_figure(tmp_path):
    out = tmp_path / "v"
    args = ("compare", "groups", REAL, "--fit-steps", 30, "--tau", "2.5,4", "--out", out)
    r = _run(*args, "--draws", 10, "--reps", 5, "--fit-group-size", 0)
    assert r.exit_code == 0, r.output
    t = pl.read_csv(out / "validation_groups.csv")
    assert t.columns[: len(COLUMNS)] == list(COLUMNS)
    assert set(t["model"]) == {"hierarchical", "tb_stats_icc", "no_within"}
    assert sorted(set(t["G"])) == list(range(1, 9)) and set(t["B"]) == {16}
    assert (out / "validation_groups.png").stat().st_size > 10_000
    r = _run(*args, "--draws", 10, "--reps", 5, "--length-model", "empirical")
    assert r.exit_code == 0, r.output  # same command may replace its own output
    assert set(pl.read_csv(out / "validation_groups.csv")["model"]) == {"empirical"}


@pytest.mark.slow(
    reason="two 51,200-sample graph-walk logs read three times, 16 G validated: 13 CPU-s at load 6"
)
def test_held_out_run_and_step_window(tmp_path, monkeypatch):
    """Cross-run validation on the graph-walk runs (seed 0 fitted, seed 1 measured from
    step 150) and a step-indexed calibration the simulator runs on."""
    # the empirical calibration's hierarchical fit is for reference only (not what the
    # simulator draws from, nor what this test reads): on 1 group in 16 of the 3,200, not 1 in 2
    monkeypatch.setattr(groups_scenario, "REFERENCE_FIT_GROUPS", 200)
    gw = Path(__file__).parent / "data" / "groups"
    fit, other = gw / "graph_walk" / "samples.parquet", gw / "graph_walk_seed1" / "samples.parquet"
    out = tmp_path / "x"
    r = _run(
        *("compare", "groups", fit, "--held-out", other, "--from-step", 150, "--tau", "12"),
        *("--length-model", "empirical", "--step-window", 30, "--out", out),
        *("--draws", 10, "--reps", 5, "--prompts", 8),
    )
    assert r.exit_code == 0, r.output
    t = pl.read_csv(out / "validation_groups.csv")
    assert set(t["model"]) == {"empirical", "empirical_s30"}
    assert set(t["n_steps"]) == {50} and sorted(set(t["G"])) == list(range(1, 17))
    assert json.loads((out / "config.json").read_text())["held_out"] == [str(other)]
    cal = tmp_path / "s.json"
    r = _run(
        "calibrate", "groups", fit, "--length-model", "empirical", "--step-window", 30, "--out", cal
    )
    assert r.exit_code == 0, r.output
    assert json.loads(cal.read_text())["fit"]["lengths_fit_groups"] == "1 in 16 (200 of 3200)"
    lengths = load_scenario(cal).lengths
    assert lengths.window == 30 and sorted(set(lengths.group_steps.tolist())) == list(range(200))
    r = _run(
        "sim",
        "--calibration",
        cal,
        "--controller",
        "static:4",
        "--steps",
        3,
        "--out",
        tmp_path / "o",
    )
    assert r.exit_code == 0, r.output


def _write(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _steps(n_steps=3, G=3):
    return [
        {"step": t, "uid": p, "response_lengths": [10 + p + j for j in range(G)]}
        for t in range(n_steps)
        for p in range(2)
    ]


BAD = {
    "no length field": (
        [{"step": 0, "uid": 0, "foo": [1, 2]}],
        [],
        r"bad.jsonl: line 1: no lengths field",
    ),
    "negative": (
        _steps()[:1] + [{"step": 0, "uid": 1, "response_lengths": [4, -1, 3]}],
        [],
        r"bad.jsonl: line 2: field 'response_lengths': length -1 is not an integer",
    ),
    "non-integer": (
        _steps()[:1] + [{"step": 0, "uid": 1, "response_lengths": [4, 2.5, 3]}],
        [],
        r"bad.jsonl: line 2: field 'response_lengths': length 2.5",
    ),
    "nan": (
        _steps()[:1] + [{"step": 0, "uid": 1, "response_lengths": [4, float("nan"), 3]}],
        [],
        r"bad.jsonl: line 2: field 'response_lengths': length nan",
    ),
    "one step": (_steps(1), ["compare"], r"bad.jsonl: field 'step': one step only"),
    "K >= steps": (
        _steps(3),
        ["compare"],
        r"bad.jsonl: field 'step': --fit-steps 3 >= the 3 steps",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, case):
    records, only, message = BAD[case]
    src = _write(tmp_path / "bad.jsonl", records)
    for cmd in only or ["calibrate", "compare"]:
        out = tmp_path / f"out-{cmd}"
        if cmd == "calibrate":
            r = _run("calibrate", "groups", src, "--out", out)
        else:
            r = _run("compare", "groups", src, "--fit-steps", 3, "--out", out)
        assert r.exit_code == 2, (cmd, r.output)
        err = r.output.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("Error: "), r.output
        assert re.search(message, err[0]), err[0]
        assert not out.exists()


def test_validate_accepts_unequal_group_sizes(tmp_path):
    """A group of 2 where the others have 3 (a filtered or regenerated group): read, the
    note printed, G measured up to 3 on the full groups."""
    recs = _steps(5)
    recs[8] = {"step": 4, "uid": 0, "response_lengths": [4, 3]}
    src = _write(tmp_path / "rag.jsonl", recs)
    out = tmp_path / "v"
    r = _run("compare", "groups", src, "--fit-steps", 3, "--draws", 5, "--reps", 5, "--out", out)
    assert r.exit_code == 0, r.output
    table = pl.read_csv(out / "validation_groups.csv")
    assert sorted(table["G"].unique()) == [1, 2, 3]
    assert "group sizes 2-3: 1 of 10 groups" in r.output


def test_tau_not_above_one_is_refused(tmp_path):
    out = tmp_path / "v"
    r = _run("compare", "groups", REAL, "--fit-steps", 20, "--tau", "2,1", "--out", out)
    assert r.exit_code == 2
    assert r.output.strip().splitlines()[-1] == (
        "Error: Invalid value for '--tau': item '1': 1.0 is not in the range x>1.0."
    )
    assert not out.exists()


def test_pass_rate_block_agrees_with_calibrate_pass_rate(tmp_path):
    out = tmp_path / "math.json"
    r = _run("calibrate", "groups", MATH, "--lengths-field", "response_chars", "--out", out)
    assert r.exit_code == 0, r.output
    block = json.loads(out.read_text())["pass_rate"]
    pr = tmp_path / "pr.json"
    r = _run("calibrate", "pass-rate", MATH, "--lengths-field", "response_chars", "--out", pr)
    assert r.exit_code == 0, r.output
    ref = json.loads(pr.read_text())["pass_rate"]
    assert block["fit"] == ref["fit"] and block["coupling"] == ref["coupling"]
    # the values measured before the two readers were merged (docs/learning.md section 1)
    assert block["spec"] == ref["spec"] == "beta:0.3073,0.02855"
    assert block["coupling"] == -0.5751
    assert block["provenance"]["n_samples"] == 800
    # no rewards (the real run's trace, schema v1): no block, and the fit says why
    r = _run("calibrate", "groups", REAL, "--out", tmp_path / "real.json")
    d = json.loads((tmp_path / "real.json").read_text())
    assert "pass_rate" not in d and d["fit"]["pass_rate"].startswith("not fitted")


def test_within_law_and_fit_window_options(tmp_path):
    """--within-law auto picks by AIC and names the fitted law; --fit-window fits the last
    W steps (the calibration says which steps; the scenario keeps the law)."""
    out = tmp_path / "v"
    args = ("compare", "groups", REAL, "--fit-steps", 6, "--fit-window", 2, "--tau", "3")
    r = _run(*args, "--within-law", "gumbel", "--draws", 5, "--reps", 3, "--out", out)
    assert r.exit_code == 0, r.output
    t = pl.read_csv(out / "validation_groups.csv")
    assert set(t["model"]) == {"hierarchical_gumbel_w2", "hierarchical_gumbel_w2_fitG4"}
    assert set(t["law"]) == {"gumbel"}
    cal = tmp_path / "c.json"
    r = _run("calibrate", "groups", REAL, "--within-law", "auto", "--fit-window", 2, "--out", cal)
    assert r.exit_code == 0, r.output
    fit = json.loads(cal.read_text())["fit"]
    assert set(fit["aic_by_law"]) == {"normal", "gumbel", "t"} and fit["fit_steps"] == [38, 39]
    best = min(fit["aic_by_law"], key=fit["aic_by_law"].get)
    assert fit["lengths"]["within_law"] == best == load_scenario(cal).lengths.within_law
    assert "AIC normal" in r.output
    auto = ("--within-law", "auto", "--fit-group-size", 0, "--draws", 5, "--reps", 3)
    r = _run(*args, *auto, "--out", tmp_path / "a")
    assert r.exit_code == 0, r.output
    law = pl.read_csv(tmp_path / "a" / "validation_groups.csv")["law"][0]
    assert re.fullmatch(
        r"(normal|gumbel|t\(df=\d+\.\d\d\)) \[AIC normal [\d.]+, gumbel [\d.]+, t [\d.]+\]", law
    ), law
    r = _run(*args, "--within-law", "lognormal", "--out", tmp_path / "w")
    assert r.exit_code == 2 and not (tmp_path / "w").exists()


def test_several_fit_runs_and_a_held_out_one_get_the_target_columns(tmp_path):
    runs = [_write(tmp_path / f"r{i}.jsonl", _steps(4)) for i in range(3)]
    out = tmp_path / "t"
    r = _run(
        "compare", "groups", runs[0], runs[1], "--held-out", runs[2], "--tau", "1.1",
        "--length-model", "empirical", "--draws", 5, "--reps", 5, "--out", out,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    t = pl.read_csv(out / "validation_groups.csv")
    assert {"floor", "target", "meets"} <= set(t.columns)
    assert t["floor"].max() == 0.0  # three copies of one run: no run-to-run spread
    assert "target: empirical: " in r.output


def test_empirical_calibration_leaves_out_smaller_groups_so_the_logged_g_simulates(tmp_path):
    recs = _steps(4)
    recs[5] = {"step": 2, "uid": 1, "response_lengths": [4, 3]}  # one group of 2, others 3
    src = _write(tmp_path / "rag.jsonl", recs)
    cal = tmp_path / "e.json"
    r = _run("calibrate", "groups", src, "--length-model", "empirical", "--out", cal)
    assert r.exit_code == 0, r.output
    assert "empirical mode left out the 1 smaller" in r.output
    d = json.loads(cal.read_text())
    assert len(d["lengths"]["groups"]) == 7 and {len(g) for g in d["lengths"]["groups"]} == {3}
    r = _run(
        "sim",
        "--calibration",
        cal,
        "--controller",
        "static:3",
        "--steps",
        2,
        "--out",
        tmp_path / "o",
    )
    assert r.exit_code == 0, r.output


def test_lengths_at_the_stated_cap_are_censored(tmp_path):
    """A log clipped at --max-response-length 200 without a cap or finish-reason field:
    every length equal to 200 is censored at it (the fit's and the printed count)."""
    rng = np.random.default_rng(0)
    lengths = np.minimum(rng.lognormal(5.0, 0.4, size=(40, 4)).astype(int) + 1, 200)
    at_cap = int((lengths == 200).sum())
    assert 10 <= at_cap <= 150  # a clipped tail, not all or nothing
    path = tmp_path / "clipped.jsonl"
    path.write_text(
        "".join(
            json.dumps({"step": i // 8, "uid": i, "response_lengths": g.tolist()}) + "\n"
            for i, g in enumerate(lengths)
        )
    )
    out = tmp_path / "c.json"
    r = _run("calibrate", "groups", path, "--max-response-length", 200, "--out", out)
    assert r.exit_code == 0, r.output
    assert f"({at_cap} censored)" in r.output
    assert json.loads(out.read_text())["fit"]["lengths"]["n_censored"] == at_cap


def test_an_existing_calibration_keeps_its_cost_learning_and_defaults(tmp_path):
    """calibrate groups --out EXISTING replaces the lengths and merges the rest, as
    calibrate learning does: the file's cost, engine and prompt length (its --cost-from
    when none is given), learning block and other defaults stay; the pass rates the data
    fit replace the file's (said)."""
    existing = json.loads((Path(__file__).parents[1] / "sim" / "data" / "gsm8k.json").read_text())
    existing["cost"]["a_s"] = 0.123
    existing["defaults"]["lr"] = 3e-6
    out = tmp_path / "mine.json"
    out.write_text(json.dumps(existing))
    r = _run("calibrate", "groups", REAL, "--out", out)
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    assert d["cost"].items() >= existing["cost"].items() and d["cost"]["a_s"] == 0.123
    assert d["engine"].items() >= existing["engine"].items()
    assert d["learning"] == existing["learning"]
    assert d["defaults"]["target_reward"] == 0.9 and d["defaults"]["lr"] == 3e-6
    assert d["defaults"]["prompts"] == 16  # the data's B
    assert d["lengths"] != existing["lengths"]
    assert d["pass_rate"] == existing["pass_rate"]  # the trace has no 0/1 rewards to fit
    assert f"kept from {out}: cost, engine, pass_rate, learning, defaults" in r.output
    load_scenario(out)  # still a calibration sim loads
    # --cost-from given: its cost wins, the learning block still stays
    r = _run("calibrate", "groups", REAL, "--out", out, "--cost-from", "longcot")
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    assert d["cost"] == load_scenario("longcot").cost.to_dict() and "learning" in d


def test_a_pass_rate_the_data_fit_replaces_the_files():
    new = {"lengths": {}, "pass_rate": {"spec": "fixed:0.5"}, "provenance": {}, "defaults": {}}
    old = {"lengths": {}, "pass_rate": {"spec": "fixed:0.9"}, "learning": {"kappa": 1.0}}
    d, kept, replaced = merge_existing(new, old, cost_kept=False)
    assert d["pass_rate"] == {"spec": "fixed:0.5"} and d["learning"] == {"kappa": 1.0}
    assert kept == ["learning"] and replaced == ["pass_rate"]


def test_a_held_out_run_of_larger_g_is_predicted_up_to_its_g(tmp_path):
    """Fitted at G = 4 (the first 4 samples of each group), measured on the run at G = 8:
    the lognormal models predict every G to 8; the empirical one stops at the fit's 4."""
    fit = tmp_path / "g4.parquet"
    pl.read_parquet(REAL).filter(pl.col("sample_idx") < 4).with_columns(
        pl.lit(4).alias("group_size")
    ).write_parquet(fit)
    for model, top in (("lognormal", 8), ("empirical", 4)):
        out = tmp_path / model
        r = _run(
            *("compare", "groups", fit, "--held-out", REAL, "--tau", "4", "--out", out),
            *("--draws", 5, "--reps", 3, "--length-model", model, "--fit-group-size", 0),
        )
        assert r.exit_code == 0, r.output
        assert sorted(set(pl.read_csv(out / "validation_groups.csv")["G"])) == list(
            range(1, top + 1)
        )
