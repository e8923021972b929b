"""The answers of the studies that put predictions beside measurements: ``compare
idle|collapse|horizon|learning`` and ``compare groups|verl-tb|replay``. Each puts the
model's error beside the naive rules' and the floor where the study measured them, and
says which rows the fit never saw."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import cast

import polars as pl
from rolloutlab.analysis.collapse.baselines import MDAPES, named_scores
from rolloutlab.analysis.figures import numbers as fmt
from rolloutlab.analysis.figures.answers.base import (
    Answer,
    AnswerError,
    best_flags,
    field_of,
    need_columns,
    read_table,
)
from rolloutlab.analysis.inputs.run_input import read_object


def _verdict(model: float, rules: Mapping[str, float | None], what: str) -> str:
    """``beats`` / ``does not beat`` the best naive rule, in words (lower is better)."""
    said = _against_best(model, rules, what)
    return f" It {said}." if said else ""


def _against_best(model: float | None, rules: Mapping[str, float | None], what: str) -> str:
    """``beats the best naive rule (constant, 5.48 % MAPE)`` or ``does not beat ...``: the
    model against the lowest finite value of ``rules`` (lower is better; a tie does not
    beat); ``""`` when the model's value or every rule's is missing."""
    finite = {k: v for k, v in rules.items() if v is not None and v == v}
    if not finite or model is None or model != model:
        return ""
    name, value = min(finite.items(), key=lambda kv: kv[1])
    word = "beats" if model < value else "does not beat"
    return f"{word} the best naive rule ({name}, {fmt.percent(value)} % {what})"


def idle_answer(study: Path, cfg: dict) -> Answer:
    """``compare idle``: makespan and idle-fraction errors of the simulator on held-out
    steps, beside the replay (measured lengths) and the constant, persistence and linear
    rules."""
    path = study / "idle_summary.json"
    doc = read_object(path, AnswerError)
    rows = [r for r in field_of(doc, path, "summary") if r.get("scope") == "all"]
    if not rows:
        raise AnswerError(f"{path}: malformed summary: no row with scope 'all'")
    order = {"drawn": 0, "replay": 1, "constant": 2, "persistence": 3, "linear": 4}
    names = {"drawn": "simulator (drawn lengths)", "replay": "replay (measured lengths)",
             "constant": "constant (naive rule)",
             "persistence": "persistence (previous step)",
             "linear": "linear trend in the step (naive rule)"}  # fmt: skip
    table = pl.DataFrame(
        [
            {
                "prediction": names.get(r["prediction"], r["prediction"]),
                "held_out_steps": r["held_out_steps"],
                "makespan_mdape": r["makespan_mdape"],
                "idle_frac_mae": r["idle_mae"],
                "straggler_agreement": r.get("straggler_agreement"),
            }
            for r in sorted(rows, key=lambda r: order.get(r["prediction"], 9))
        ]
    )
    by = {r["prediction"]: r for r in rows}
    drawn = by.get("drawn")
    k, steps = doc.get("fit_steps"), doc.get("steps")
    lead = (
        f"Fitted on the first {k} steps, the simulator predicts the {drawn['held_out_steps']} "
        f"unseen steps' generation makespan to a median {fmt.percent(drawn['makespan_mdape'])} % "
        f"and the slot idle fraction to {fmt.percent(drawn['idle_mae'])} points."
        if drawn
        else f"{steps} steps, the first {k} fitted."
    )
    naive = {n: by[n]["makespan_mdape"] for n in ("constant", "persistence", "linear") if n in by}
    if drawn and naive:
        lead += _verdict(drawn["makespan_mdape"], naive, "makespan MdAPE")
    return Answer(
        "How well does the simulator predict a real run's step makespan and idle slots?",
        lead,
        table,
        (),
        (
            f"every row on unseen steps (after step {k}); replay uses the measured lengths, so "
            "its error is the engine and cost model's alone; no run-to-run floor (one run)",
        ),
    )


def _rule_rows(doc: dict, path: Path, model: str) -> tuple[list[dict], str, str]:
    """The model's row, each naive rule's and the floor's on the same held-out runs
    (``scores``, ``baselines``: :mod:`analysis.collapse.baselines`), with the cells they
    are scored on (``seen`` / ``unseen`` by the fit; ``oracle`` for the floor); the
    verdict against the best naive rule in words; and the note. ``([], "", note)`` for a
    summary written before the naive rules were computed."""
    from rolloutlab.analysis.collapse.baselines import RULE_NAMES, verdict

    if "baselines" not in doc or "scores" not in doc:
        return (
            [],
            "",
            "no naive rule in this summary (written before they were computed): rerun the study",
        )
    scores = field_of(doc, path, "scores")
    base = field_of(doc, path, "baselines")
    rules, fl, cells = (
        field_of(doc, path, "baselines", "rules"),
        base.get("floor", {}),
        base.get("cells"),
    )
    keys = ("accuracy", "brier", *MDAPES)
    rows = [{"predictor": model, "cells": cells, **{k: named_scores(scores).get(k) for k in keys}}]
    rows += [{"predictor": RULE_NAMES.get(r, r), "cells": cells,
              **{k: named_scores(v).get(k) for k in keys}}
             for r, v in rules.items()]  # fmt: skip
    rows.append({"predictor": "run-to-run floor (held-out seeds)", "cells": "oracle",
                 "accuracy": fl.get("accuracy"), "brier": fl.get("brier"),
                 MDAPES[0]: fl.get("mdape"), MDAPES[1]: None})  # fmt: skip
    said = verdict(scores, rules)
    note = (
        f"cells {cells}: {'the fit saw other seeds of every held-out cell' if cells == 'seen' else 'no fitted run had the held-out setting'}; "
        "MdAPE all collapsed: over every collapsed held-out run, the same runs for every "
        "predictor (a prediction beyond the run counted at T + 1; the floor's over the runs "
        "whose cell has another); MdAPE both collapsed: over the runs collapsed measured and "
        "predicted, each predictor's own (not like for like); brier the mean squared error of the collapse probability; the floor is read off the "
        "held-out runs themselves (each cell's other seeds), so no predictor of the cell beats it"
    )  # fmt: skip
    return rows, f" Against the best naive rule: {said}." if said else "", note


def collapse_answer(study: Path, cfg: dict) -> Answer:
    """``compare collapse``: held-out classification agreement and collapse-step error,
    beside the naive rules and the run-to-run floor."""
    path = study / "collapse_summary.json"
    doc = read_object(path, AnswerError)
    # every held-out field read through field_of, so a malformed summary is the user's file
    # named, not a failure inside the page builder
    h = {
        k: field_of(doc, path, "held_out", k)
        for k in ("points", "agreement", "t_collapse_mdape", "both_collapsed")
    }
    rows, said, note = _rule_rows(doc, path, "collapse model")
    if rows:
        table = pl.DataFrame(rows, infer_schema_length=None)
    else:
        table = pl.DataFrame(
            [{"predictor": "collapse model", "cells": "unseen" if doc.get("split") != "seed" else "seen",
              "accuracy": h["agreement"], "brier": None, MDAPES[0]: None,
              MDAPES[1]: h["t_collapse_mdape"]}]
        )  # fmt: skip
    lead = (
        f"Fitted on half the grid (split by {doc.get('split')}), the collapse model classifies "
        f"{fmt.percent(h['agreement'])} % of the {h['points']} unseen runs correctly; where both "
        f"collapse ({h['both_collapsed']} runs, measured and predicted) its collapse step is off "
        f"by a median {fmt.percent(h['t_collapse_mdape'])} %."
    )
    return Answer(
        "Does the collapse model predict which unseen runs collapse, and when?",
        lead + said,
        table,
        (),
        (note,),
    )


def horizon_answer(study: Path, cfg: dict) -> Answer:
    """``compare horizon``: held-out agreement, Brier score and collapse-step MdAPE of the
    horizon law beside the naive rules and the run-to-run floor, the seed floor, the
    classification ceiling and each mechanism's law."""
    path = study / "horizon_summary.json"
    doc = read_object(path, AnswerError)
    h = field_of(doc, path, "held_out")
    rows, said, note = _rule_rows(doc, path, "horizon law (all mechanisms)")
    cells = rows[0]["cells"] if rows else ("seen" if doc.get("split") == "seed" else "unseen")
    if not rows:
        rows = [{"predictor": "horizon law (all mechanisms)", "cells": cells,
                 "accuracy": h["agreement"], "brier": None, MDAPES[0]: None,
                 MDAPES[1]: h["t_collapse_mdape"]}]  # fmt: skip
    floor = doc.get("seed_floor")
    if floor:
        rows.append({"predictor": "seed floor (fit seeds of the cell, collapsed only)", "cells": "seen",
                     "accuracy": floor["agreement"], "brier": None, MDAPES[0]: None,
                     MDAPES[1]: floor["mdape"]})  # fmt: skip
    if "class_ceiling" in doc:
        rows.append({"predictor": "ceiling (best per-cell classifier)", "cells": "oracle",
                     "accuracy": doc["class_ceiling"], "brier": None, MDAPES[0]: None,
                     MDAPES[1]: None})  # fmt: skip
    mechanisms = doc.get("mechanisms", {})
    if len(mechanisms) > 1:
        for mech, m in mechanisms.items():
            sc = named_scores(m.get("scores", {}))
            rows.append({"predictor": f"law: {mech}", "cells": cells,
                         "accuracy": m["held_out"]["agreement"], "brier": sc.get("brier"),
                         MDAPES[0]: sc.get(MDAPES[0]),
                         MDAPES[1]: m["held_out"]["t_collapse_mdape"]})  # fmt: skip
    table = pl.DataFrame(rows, infer_schema_length=None)
    hold = doc.get("held_out_value")
    what = (
        f"{doc.get('split')} = {fmt.setting(hold)} held out"
        if hold is not None
        else f"fit on half the {doc.get('split')}s"
    )
    on_all = rows[0][MDAPES[0]] is not None
    law_mdape = rows[0][MDAPES[0] if on_all else MDAPES[1]]
    lead = (
        f"On {h['points']} unseen runs ({what}, law {doc.get('law', 'pooled')}), the horizon law "
        f"classifies {fmt.percent(h['agreement'])} % of runs correctly and predicts the collapse "
        f"step to a median {fmt.percent(law_mdape)} % "
        + ("over every collapsed run" if on_all else "over the runs collapsed on both sides")
    )
    if floor:
        lead += (
            f"; another seed of the same cell does {fmt.percent(floor['agreement'])} % and "
            f"{fmt.percent(floor['mdape'])} %"
        )
    if "class_ceiling" in doc:
        lead += f"; no per-cell classifier can pass {fmt.percent(doc['class_ceiling'])} %"
    return Answer(
        "Does the collapse-horizon law predict when unseen runs collapse?",
        lead + "." + said,
        table,
        (),
        (note,),
    )


def learning_answer(study: Path, cfg: dict) -> Answer:
    """``compare learning``: measured against predicted time to the target per run,
    the fit runs marked, ranks side by side."""
    path = study / "learning_comparison.csv"
    df = read_table(path)
    need_columns(df, path, "run", "controller", "measured_time_to_target_s",
          "predicted_time_to_target_s", "rel_error", "measured_rank", "predicted_rank")  # fmt: skip
    fit_runs = {Path(p).name for p in cfg.get("fit", []) or []}
    naive = "constant_rel_error" in df.columns
    table = df.select(
        pl.when(pl.col("run").is_in(list(fit_runs))).then(pl.lit("fit")).otherwise(pl.lit("unseen")).alias("seen"),
        "run", "controller", "measured_time_to_target_s", "predicted_time_to_target_s",
        "rel_error", *(["constant_rel_error"] if naive else []), "measured_rank", "predicted_rank",
    )  # fmt: skip
    unseen = table.filter(pl.col("seen") == "unseen")
    errs = unseen["rel_error"].drop_nulls().abs()
    agree = (unseen["measured_rank"] == unseen["predicted_rank"]).sum()
    target = cfg.get("target_accuracy", cfg.get("target"))
    lead = (
        f"Time to accuracy {fmt.setting(target)} on {unseen.height} unseen runs: median "
        f"|error| {fmt.percent(errs.median())} % (largest {fmt.percent(errs.max())} %); the "
        f"predicted rank is the measured one for {agree} of {unseen.height}."
        if errs.len()
        else f"No unseen run has both a measured and a predicted time to accuracy {fmt.setting(target)}."
    )
    if naive and errs.len():
        base = unseen["constant_rel_error"].drop_nulls().abs()
        if base.len():
            worse = "" if errs.median() < base.median() else " (the model does not beat it)"
            lead += (f" The naive rule \"the fit runs' steps, priced by the same cost\": median "
                     f"|error| {fmt.percent(base.median())} %{worse}.")  # fmt: skip
    notes = ["fit: a run the learning and cost models were fitted on; unseen: predicted"]
    if naive:
        notes.append("constant_rel_error: every run takes the fit runs' mean steps to the "
                     "target, priced on its own predicted clock (the naive rule)")  # fmt: skip
    by = study / "learning_comparison_by_controller.csv"
    if by.exists():
        notes.append("per controller over seeds (with the seed spread, the floor): below")
    return Answer(
        "How well does the learning model predict each run's time to the target?",
        lead,
        table,
        (),
        tuple(notes),
    )


def validate_groups_answer(study: Path, cfg: dict) -> Answer:
    """``compare groups``: per model, the error of P(straggler) over the group sizes on
    held-out steps, the baselines beside the hierarchical fit and the measurement's
    standard error (the floor) beside both."""
    path = study / "validation_groups.csv"
    df = read_table(path)
    need_columns(
        df, path, "G", "tau", "model", "p_straggler_meas", "p_straggler_pred", "abs_error", "fit_G"
    )
    tau = df["tau"][0]
    df = df.filter(pl.col("tau") == tau)
    se = "p_straggler_meas_se" in df.columns
    table = (
        df.group_by("model", maintain_order=True)
        .agg(
            pl.col("fit_G").first(),
            pl.len().alias("group_sizes"),
            pl.col("abs_error").mean().alias("mean_abs_error_rate"),
            pl.col("abs_error").max().alias("max_abs_error_rate"),
            *([(pl.col("abs_error") <= 2 * pl.col("p_straggler_meas_se")).mean().alias("within_2_se_share"),
               pl.col("p_straggler_meas_se").median().alias("median_se_rate")] if se else []),
        )
        .sort("mean_abs_error_rate")
    )  # fmt: skip
    best = table.row(0, named=True)
    others = table.filter(pl.col("model") != best["model"])
    g = df["G"]
    lead = (
        f"On held-out steps, {best['model']} (fitted at G = {best['fit_G']}) predicts "
        f"P(max/median > {fmt.setting(tau)}) at G = {g.min()}-{g.max()} with a mean absolute "
        f"error of {fmt.percent(best['mean_abs_error_rate'])} points"
        + "".join(
            f"{', against ' if i == 0 else ', '}{fmt.percent(r['mean_abs_error_rate'])} for {r['model']}"
            for i, r in enumerate(others.iter_rows(named=True))
        )
        + (f"; the measurement's standard error is {fmt.percent(best['median_se_rate'])} points"
           if se else "")
        + "."
    )  # fmt: skip
    return Answer(
        "From the first steps of a run, can the straggler probability at every G be predicted?",
        lead,
        table,
        best_flags(table["mean_abs_error_rate"].to_list()),
        (
            "every error on steps the fit never saw; baselines: no_within (all spread between "
            "prompts), tb_stats_icc (TensorBoard statistics split by the bundled ICC); rates "
            "are P(max/median > tau) per step, the measured SE is the floor",
        ),
    )


def validate_verl_answer(study: Path, cfg: dict) -> Answer:
    """``compare verl-tb``: the simulator's generation-time MAPE on held-out steps
    beside the constant, linear and (outputs that hold it) persistence rules; the
    previous-step reference is shown, not counted as a rule to beat."""
    path = study / "validation.csv"
    df = read_table(path)
    if "rule" in df.columns:  # compare verl-tb --calibration: the whole step, per rule
        return _whole_step_answer(df, path, cfg)
    need_columns(
        df, path, "run", "fit_steps", "test_steps", "mape_sim", "mape_constant", "mape_linear"
    )
    rules = [r for r in ("constant", "persistence", "linear") if f"mape_{r}" in df.columns]
    extra = ["mape_previous_step"] if "mape_previous_step" in df.columns else []
    table = df.select(
        "run", "fit_steps", "test_steps", "mape_sim", *(f"mape_{r}" for r in rules), *extra
    )
    best = df.select(pl.min_horizontal(*(f"mape_{r}" for r in rules))).to_series()
    wins = (df["mape_sim"] < best).to_list()
    medians = ", ".join(f"{r} {fmt.percent(df[f'mape_{r}'].median())} %" for r in rules)
    lead = (
        f"On the unseen steps after the first {fmt.number(df['fit_steps'][0])}, the simulator's "
        f"generation time is off by a median {fmt.percent(df['mape_sim'].median())} % (MAPE per run); "
        f"it beats every naive rule ({', '.join(rules)}) on {sum(wins)} of {df.height} runs"
        + ("" if all(wins) else f" and does not beat the best on the others (medians: {medians})")
        + "."
    )
    return Answer(
        "Fitted on a verl run's first steps, how well does the simulator predict the later steps' generation time?",
        lead,
        table,
        tuple(bool(w) for w in wins),
        (
            "marked: the simulator beats every naive rule on that run; every error on unseen "
            "steps of a run whose first steps were fitted; no run-to-run floor (no two runs "
            "share a configuration)",
        ),
    )


def _fitted_runs(cfg: dict) -> set[str] | None:
    """The runs the calibration of a ``compare verl-tb --calibration`` study was fitted
    on: the config's ``fitted_runs``, else the calibration file's ``provenance.runs``;
    None when neither can be read."""
    if isinstance(cfg.get("fitted_runs"), list):
        return set(map(str, cfg["fitted_runs"]))
    try:
        doc = read_object(Path(str(cfg.get("calibration"))), AnswerError)
    except (AnswerError, OSError):
        return None
    runs = (doc.get("provenance") or {}).get("runs")
    return set(map(str, runs)) if isinstance(runs, list) else None


STEP_STATISTICS = (("mape", "mean", "MAPE"), ("median_ape", "median", "MdAPE"))
"""The per-run statistics of ``compare verl-tb --calibration``'s ``validation.csv`` that a
whole-step answer judges: (column, statistic over a run's steps, short name)."""


def _whole_step_answer(df: pl.DataFrame, path: Path, cfg: dict) -> Answer:
    """``compare verl-tb --calibration``: per run, the mean and the median absolute
    percentage error over its steps (MAPE, MdAPE) of the whole step (``timing_s/step``)
    predicted by the calibration beside the constant, linear and persistence rules (rows
    ``model`` / ``constant`` / ...), with a verdict against the best naive rule for each
    statistic (the two can disagree: a model that prices rare long steps wins on the mean
    while a constant wins on the median); runs the calibration was fitted on marked
    ``fit``, the others ``unseen``. A file without ``median_ape`` is judged on the mean."""
    need_columns(df, path, "run", "steps", "rule", "mape")
    rules = df["rule"].unique(maintain_order=True).to_list()
    if "model" not in rules:
        raise AnswerError(f"{path}: no row with rule 'model'")
    naive = [r for r in rules if r != "model"]
    stats = [st for st in STEP_STATISTICS if st[0] in df.columns]
    fitted = _fitted_runs(cfg)
    seen = pl.col("run").map_elements(
        lambda r: "unknown" if fitted is None else ("fit" if r in fitted else "unseen"), pl.String
    )
    table = df.select(  # one row per (run, rule): the rules' errors read down a column
        seen.alias("seen"), "run", "rule", "steps",
        *(pl.col(col).alias(short.lower()) for col, _, short in stats),
    )  # fmt: skip
    shorts = [short.lower() for _, _, short in stats]

    def beats_every_rule(run: str) -> bool:
        """Whether the model's error on ``run`` is below every naive rule's, per statistic."""
        err = {(r["rule"], c): r[c] for r in table.filter(pl.col("run") == run).iter_rows(named=True)
               for c in shorts}  # fmt: skip
        return all(
            err[("model", c)] < min((err[(n, c)] for n in naive if err.get((n, c)) is not None),
                                    default=float("inf"))
            for c in shorts
        )  # fmt: skip

    best = tuple(r["rule"] == "model" and beats_every_rule(r["run"])
                 for r in table.iter_rows(named=True))  # fmt: skip
    unseen = table.filter(pl.col("seen") != "fit")
    runs = unseen["run"].unique(maintain_order=True).to_list()

    def median(rule: str, short: str) -> float | None:
        """A run's own value, or the median over the unseen runs."""
        return cast("float | None", unseen.filter(pl.col("rule") == rule)[short.lower()].median())

    where = "unseen" if fitted is not None else "scored"
    if runs:
        several = len(runs) > 1
        values = {short: median("model", short) for _, _, short in stats}
        said = " and ".join(
            f"a {word} absolute percentage error ({short}) of {fmt.percent(values[short])} %"
            for _, word, short in stats
        )
        verdicts = "; ".join(
            f"on the {word} it "
            + (_against_best(values[short], {n: median(n, short) for n in naive}, short)
               or "cannot be compared with a naive rule")
            for _, word, short in stats
        )  # fmt: skip
        lead = (
            f"On {len(runs)} {where} run{'s' if several else ''} "
            f"({', '.join(runs)}), the calibration predicts the whole step "
            f"(timing_s/step) with {said} over "
            + ("each run's steps (medians over the runs)" if several else "its steps")
            + f". {verdicts[0].upper()}{verdicts[1:]}."
        )
    else:
        lead = "Every scored run is one the calibration was fitted on: no unseen run."
    fit_note = (
        f"fit: a run the calibration was fitted on ({', '.join(sorted(fitted))}); unseen: never seen by the fit"
        if fitted is not None
        else "the calibration's fitted runs could not be read: held-out status unknown"
    )
    return Answer(
        "Does a calibration predict the whole step time of verl runs it never saw?",
        lead,
        table,
        best,
        (
            f"{fit_note}; MAPE = mean |pred / measured - 1| over a run's steps, MdAPE = their "
            "median; persistence predicts each step by the run's previous one (steps: those "
            "scored); marked: the model, where it beats every naive rule on every statistic",
        ),
    )


def validate_replay_answer(study: Path, cfg: dict) -> Answer:
    """``compare replay``: per simulated controller, P(straggler) and the length idle
    fraction predicted against measured on the real run's steps."""
    path = study / "replay.csv"
    df = read_table(path)
    need_columns(df, path, "controller", "tau", "p_straggler_pred", "p_straggler_meas", "abs_error")
    cols = ["controller", *(c for c in ("mean_G",) if c in df.columns), "p_straggler_meas",
            "p_straggler_pred", "abs_error",
            *(c for c in ("len_idle_meas", "len_idle_pred", "n_steps") if c in df.columns)]  # fmt: skip
    table = df.select(cols).rename(
        {"p_straggler_meas": "measured_rate", "p_straggler_pred": "predicted_rate",
         "abs_error": "abs_error_rate", "len_idle_meas": "measured_idle_frac",
         "len_idle_pred": "predicted_idle_frac"},
        strict=False,
    )  # fmt: skip
    worst = df.sort("abs_error", descending=True).row(0, named=True)
    lead = (
        f"Over {df.height} controller{'s' if df.height > 1 else ''}, the simulated "
        f"P(max/median > {fmt.setting(df['tau'][0])}) is off the measured one by at most "
        f"{fmt.percent(worst['abs_error'])} points ({worst['controller']}: "
        f"{fmt.percent(worst['p_straggler_pred'])} % predicted, "
        f"{fmt.percent(worst['p_straggler_meas'])} % measured)."
    )
    return Answer(
        "Does the simulator's controller see as many stragglers as the real run did?",
        lead,
        table,
        (),
        (
            "rates are P(max/median > tau) per step; no naive rule and no run-to-run floor here "
            "(compare run-spread measures the floor)",
        ),  # fmt: skip
    )
