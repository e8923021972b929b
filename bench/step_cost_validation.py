"""Evaluate the step-cost law's plans on their runs: plan 1 (results/step_cost_law/PLAN.md)
on ``bench/step_cost_measure.py``'s, plan 2 (PLAN2.md) with ``--plan 2`` on
``bench/step_cost_interleaved.py``'s (``RUNS/pass1``, ``RUNS/pass2``):

    python bench/step_cost_validation.py runs/step_cost --out runs/step_cost_check
    python bench/step_cost_validation.py --plan 2 runs/sc2 --out runs/sc2_check
    python bench/step_cost_validation.py --plan 2 --phase train runs/sc2 --out runs/sc2_train
    python bench/step_cost_validation.py --plan 3 runs/sc3 --out runs/sc3_check --draws 20

``--phase train`` (or ``gen``) scores plan 2's rules on one phase of the step alone, with
plan 2's split: the law's term of that phase, the power law, straight line and constant
fitted to that phase's CPU s, the floor of that phase (:func:`plan2`). ``--plan 3``
(PLAN3.md, :func:`plan3`) scores the whole step and the training phase in one go, with the
law's features drawn as plan 3 and as plan 2.

Plan 1 (below; plan 2: :func:`plan2`):
Fits the mechanism law (:mod:`analysis.learning.step_cost_law`) and the baselines (the
power law ``c0 + c1 (B G)^p`` of :mod:`analysis.learning.step_cost`, a straight line in the
rollouts through each count's mean, the fit runs' mean step cost) on the fit settings'
runs only, then predicts every setting's mean CPU s per step (held-out ones: 256 rollouts a
step). Writes ``OUT/step_cost_validation.csv`` (one row per setting), ``OUT/law.json``
(the coefficients) and ``OUT/step_cost_validation.md``, and prints the markdown.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import polars as pl
from rolloutlab.analysis.learning.compare import run_steps
from rolloutlab.analysis.learning.step_cost import busy_time, pooled_cost
from rolloutlab.analysis.learning.step_cost_law import (
    GEN_FEATURES_V1,
    TRAIN_FEATURES_V1,
    drawn_features,
    fit_kept_share,
    fit_law,
    predict_setting,
    read_steps,
)
from rolloutlab.calibration.readers.run_curve import read_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
import step_cost_interleaved as plan2_runs
from step_cost_measure import FIT, HELDOUT

RULES = ("law", "law_own_features", "power_law", "linear", "constant")


def mean_step_s(run) -> float:
    """A run's mean CPU s per step (generation + training + sync)."""
    return float((run.cpu["gen"] + run.cpu["train"] + run.cpu["sync"]).mean())


PHASES = ("step", "gen", "train")
"""What plan 2 can score: the whole step, or its generation or training phase alone."""


def mean_phase_s(run, phase: str) -> float:
    """A run's mean CPU s per step of ``phase`` (:data:`PHASES`; ``"step"``: all phases)."""
    return mean_step_s(run) if phase == "step" else float(run.cpu[phase].mean())


def law_phase_s(law, features: pl.DataFrame, phase: str) -> np.ndarray:
    """(n,) ``law``'s CPU s of ``phase`` (:data:`PHASES`) of steps with ``features``."""
    return law.step_s(features) if phase == "step" else law.phase_s(features, phase)


def phase_steps(steps: pl.DataFrame, phase: str) -> pl.DataFrame:
    """A CPU-clock steps table (:func:`run_steps`) holding only ``phase``'s time, so
    :func:`pooled_cost` fits its power law to that phase: the phase's time as the busy
    time, no sync, the clock its running sum (so the fitted ``c0`` is 0)."""
    if phase == "step":
        return steps
    t = steps[f"{phase}_time"]
    end = t.cum_sum()
    zero = pl.lit(0.0)
    return steps.with_columns(
        gen_time=t if phase == "gen" else zero, train_time=t if phase == "train" else zero,
        sync_time=zero, t_start=end - t, t_end=end,
    )  # fmt: skip


def training_work(features: pl.DataFrame) -> dict[str, float]:
    """What the learner does per step with ``features`` (:func:`step_features` rows): mean
    trained rollouts ``N`` (kept by dynamic sampling), mean padded length ``T`` (longest
    prompt + response of the step's trained rollouts, over steps that trained on
    something), mean padded tokens ``N T``."""
    n = features["rows"].to_numpy()
    cells = features["cells"].to_numpy()
    trained = n > 0
    return {"trained_rollouts": float(n.mean()),
            "padded_length": float((cells[trained] / n[trained]).mean()) if trained.any() else 0.0,
            "padded_tokens": float(cells.mean())}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", type=Path, help="folder of bench/step_cost_measure.py's runs")
    ap.add_argument("--out", type=Path, required=True, help="new folder for the tables")
    ap.add_argument("--draws", type=int, default=50, help="feature draws per step (default 50)")
    ap.add_argument("--plan", type=int, default=1, choices=(1, 2, 3),
                    help="PLAN.md, PLAN2.md or PLAN3.md")  # fmt: skip
    ap.add_argument("--phase", default="step", choices=PHASES,
                    help="plan 2 only: score the whole step (default) or one phase alone")  # fmt: skip
    args = ap.parse_args(argv)
    if args.phase != "step" and args.plan != 2:
        ap.error("--phase needs --plan 2")
    if args.out.exists():
        ap.error(f"--out {args.out} exists; give a new directory")
    if args.plan == 3 and args.phase != "step":
        ap.error("--plan 3 scores the whole step and the training phase together; no --phase")
    if args.plan in (2, 3):
        try:
            text = (plan2(args.runs, args.out, args.draws, args.phase) if args.plan == 2
                    else plan3(args.runs, args.out, args.draws))  # fmt: skip
        except ValueError as exc:
            ap.error(str(exc))
        print(text)
        return 0
    dirs = {}
    for G, B in FIT + HELDOUT:
        found = sorted(args.runs.glob(f"g{G}_b{B}_r*"))
        found = [d for d in found if (d / "steps.parquet").exists()]
        if found:
            dirs[(G, B)] = found
    fit_set = [gb for gb in FIT if gb in dirs]  # those present (PLAN.md's amendment)
    if len({g * b for g, b in fit_set}) < 2:
        ap.error(f"{args.runs}: finished fit runs span fewer than two rollout counts")
    missing = [f"{g}x{b}" for g, b in FIT + HELDOUT if (g, b) not in dirs]
    if missing:
        print(f"note: no finished run of {', '.join(missing)}", file=sys.stderr)
    runs = {gb: [read_steps(d) for d in ds] for gb, ds in dirs.items()}
    fit_runs = [r for gb in fit_set for r in runs[gb]]
    law = fit_law(fit_runs, GEN_FEATURES_V1, TRAIN_FEATURES_V1)
    power = pooled_cost([run_steps(d, "cpu") for gb in fit_set for d in dirs[gb]],
                        [read_run(d) for gb in fit_set for d in dirs[gb]])  # fmt: skip
    counts = np.array([g * b for g, b in fit_set], float)
    per_setting = np.array([np.mean([mean_step_s(r) for r in runs[gb]]) for gb in fit_set])
    line = np.polyfit(counts, per_setting, 1)  # (slope, intercept)
    level = float(per_setting.mean())
    steps = min(len(r.groups) for r in fit_runs)
    rows = []
    for (G, B), rs in runs.items():
        measured = [mean_step_s(r) for r in rs]
        m = float(np.mean(measured))
        preds = {
            "law": predict_setting(law, fit_runs, G, B, steps, rs[0].capacity, args.draws),
            "law_own_features": float(np.mean([law.step_s(r.features).mean() for r in rs])),
            "power_law": float(power[0] + busy_time(power, G * B)),
            "linear": float(np.polyval(line, G * B)),
            "constant": level,
        }
        row = {"G": G, "B": B, "rollouts": G * B,
               "role": "fit setting" if (G, B) in fit_set else "held out",
               "passes": len(rs), "measured_s": m,
               "pass_spread": (max(measured) - min(measured)) / m if len(rs) > 1 else None}  # fmt: skip
        for k, v in preds.items():
            row[f"{k}_s"] = v
            row[f"{k}_error"] = (v - m) / m
        rows.append(row)
    table = pl.DataFrame(rows).sort("rollouts", "G")
    args.out.mkdir(parents=True)
    table.write_csv(args.out / "step_cost_validation.csv")
    doc = {"gen": law.gen, "train": law.train, "sync_s": law.sync_s,
           "power_law": {"c0_s": power[0], "c1_s": power[1], "p": power[2]},
           "linear": {"c0_s": float(line[1]), "c1_s_per_rollout": float(line[0])},
           "constant_s": level, "fit_runs": [r.name for r in fit_runs],
           "steps_per_run": steps, "draws": args.draws}  # fmt: skip
    (args.out / "law.json").write_text(json.dumps(doc, indent=2) + "\n")
    text = markdown(table)
    (args.out / "step_cost_validation.md").write_text(text)
    print(text)
    return 0


RULES2 = ("law", "law_c64_fit", "law_own_features", "law_v1", "power_law", "linear", "constant")
NAIVE = ("power_law", "linear", "constant")
MIN_STEPS = 10
"""PLAN2.md's stop rule: fewer common steps than this and there is no evaluation."""


def plan2(runs_dir: Path, out: Path, draws: int = 20, phase: str = "step") -> str:
    """PLAN2.md's evaluation of ``runs_dir/pass*/`` (``bench/step_cost_interleaved.py``);
    writes ``out/step_cost_validation.csv``, ``law.json`` and ``step_cost_validation.md``
    (returned). ``phase`` (:data:`PHASES`) other than ``"step"``: the same split, draws and
    fits, every rule and the floor on that phase's CPU s alone (the law's term of it; the
    power law, line and constant fitted to it), written as ``out/{phase}_cost_validation.*``
    with the learner's work per setting (:func:`training_work`). Raises ValueError naming
    what is missing: no pass, a fit setting without a finished run, or fewer than
    :data:`MIN_STEPS` common steps, or an unknown ``phase``."""
    table, doc = score(runs_dir, 2, draws, phase)
    out.mkdir(parents=True)
    stem = "step_cost_validation" if phase == "step" else f"{phase}_cost_validation"
    table.write_csv(out / f"{stem}.csv")
    (out / "law.json").write_text(json.dumps(doc, indent=2) + "\n")
    text = markdown2(table, phase)
    (out / f"{stem}.md").write_text(text)
    return text


RULES3 = ("law", "law_plan2_draw", "law_own_features", "power_law", "linear", "constant")
NAMES3 = ("law, v3 draw", "law, plan-2 draw", "law, own features", "power law", "linear",
          "constant")  # fmt: skip


def plan3(runs_dir: Path, out: Path, draws: int = 20) -> str:
    """PLAN3.md's evaluation of ``runs_dir/pass*/`` (``bench/step_cost_interleaved.py
    --plan 3``): plan 2's split, fits and baselines on the whole step and on the training
    phase alone, the law's features drawn as plan 3 (``draw="prompts"``) and as plan 2;
    writes ``out/step_cost_validation.csv``, ``out/train_cost_validation.csv``,
    ``law.json`` and ``plan3.md`` (returned: both tables and the pass rule's verdict).
    Raises ValueError as :func:`score`."""
    tables, docs = {}, {}
    for phase in ("step", "train"):
        tables[phase], docs[phase] = score(runs_dir, 3, draws, phase)
    out.mkdir(parents=True)
    for phase, stem in (("step", "step_cost_validation"), ("train", "train_cost_validation")):
        tables[phase].write_csv(out / f"{stem}.csv")
    (out / "law.json").write_text(json.dumps(docs, indent=2) + "\n")
    text = (
        "## Whole step\n\n" + markdown2(tables["step"], "step", RULES3, NAMES3, verdict=False)
        + "## Training phase alone\n\n"
        + markdown2(tables["train"], "train", RULES3, NAMES3, verdict=False)
        + verdict3(tables["step"], tables["train"])
    )  # fmt: skip
    (out / "plan3.md").write_text(text)
    return text


def verdict3(step: pl.DataFrame, train: pl.DataFrame) -> str:
    """PLAN3.md's pass rule on :func:`plan3`'s tables: (1) |law error| <= 10 % on the whole
    step at each held-out setting; (2) on the training phase, the law's mean |error| over
    the held-out settings below the plan-2 draw's and the power law's. One markdown
    paragraph."""
    held = step.filter(pl.col("role") == "held out")
    held_t = train.filter(pl.col("role") == "held out")
    if not held.height:
        return "No held-out setting: no verdict.\n"
    each = [f"({r['G']}, {r['B']}, c{r['capacity']}, s{r['seed']}) {100 * r['law_error']:+.1f} %"
            for r in held.iter_rows(named=True)]  # fmt: skip
    one = bool((held["law_error"].abs() <= 0.10).all())
    mean = {k: float(held_t[k + "_error"].abs().mean()) for k in RULES3}
    two = mean["law"] < mean["law_plan2_draw"] and mean["law"] < mean["power_law"]
    return (
        f"**Pass rule (PLAN3.md).** (1) Whole step, |law, v3 draw error| <= 10 % at each "
        f"fresh 256-rollout setting: {'met' if one else 'not met'} ({', '.join(each)}). "
        f"(2) Training phase, the v3 draw's mean |error| ({100 * mean['law']:.1f} %) below "
        f"the plan-2 draw's ({100 * mean['law_plan2_draw']:.1f} %) and the power law's "
        f"({100 * mean['power_law']:.1f} %): {'met' if two else 'not met'}. "
        f"**Plan 3 {'passes' if one and two else 'fails'}.**\n"
    )


def score(runs_dir: Path, plan: int, draws: int, phase: str) -> tuple[pl.DataFrame, dict]:
    """One plan's (2 or 3) table of every setting of ``runs_dir/pass*/`` and its fits'
    document, on ``phase``'s CPU s (:data:`PHASES`); rules :data:`RULES2` (plan 2) or
    :data:`RULES3` (plan 3). Raises ValueError naming what is missing: no pass, a fit
    setting without a finished run, or fewer than :data:`MIN_STEPS` common steps, or an
    unknown ``phase``."""
    if phase not in PHASES:
        raise ValueError(f"plan{plan}: phase must be one of {PHASES}, got {phase!r}")
    fit_set, held_set, beyond_set = plan2_runs.plan_settings(plan)
    settings = fit_set + held_set + beyond_set
    passes = sorted(p for p in runs_dir.glob("pass*") if p.is_dir())
    if not passes:
        raise ValueError(f"{runs_dir}: no pass*/ folder of bench/step_cost_interleaved.py")
    dirs: dict[tuple, list[Path]] = {}
    for s in settings:
        found = [p / plan2_runs.run_name(*s) for p in passes]
        dirs[s] = [d for d in found if (d / "rollouts.parquet").exists()]
    missing = [plan2_runs.run_name(*s) for s in fit_set if not dirs[s]]
    if missing:
        raise ValueError(f"{runs_dir}: no finished run of fit setting(s) {', '.join(missing)}")
    full = {s: [read_steps(d) for d in ds] for s, ds in dirs.items() if ds}
    k = min(len(r.groups) for rs in full.values() for r in rs)
    if k < MIN_STEPS:
        raise ValueError(f"{runs_dir}: only {k} steps common to every run (< {MIN_STEPS})")
    runs = {s: [r.head(k) for r in rs] for s, rs in full.items()}
    fit_runs = [r for s in fit_set for r in runs[s]]
    held_capacity = held_set[0][2]  # 64: the baselines know rollouts only
    c64 = [s for s in fit_set if s[2] == held_capacity]
    c64_runs = [r for s in c64 for r in runs[s]]
    law = fit_law(fit_runs)
    law_c64 = fit_law(c64_runs)
    law_v1 = fit_law(fit_runs, GEN_FEATURES_V1, TRAIN_FEATURES_V1)
    c64_dirs = [d for s in c64 for d in dirs[s]]
    power = pooled_cost([phase_steps(run_steps(d, "cpu").head(k), phase) for d in c64_dirs],
                        [head_curve(read_run(d), k) for d in c64_dirs])  # fmt: skip
    by_count: dict[int, list[float]] = {}
    for s in c64:
        by_count.setdefault(s[0] * s[1], []).extend(mean_phase_s(r, phase) for r in runs[s])
    counts = np.array(sorted(by_count), float)
    line = np.polyfit(counts, [np.mean(by_count[int(c)]) for c in counts], 1)  # (slope, intercept)
    level = float(np.mean([mean_phase_s(r, phase) for r in c64_runs]))
    rows = []
    for s, rs in runs.items():
        G, B, capacity, seed = s
        measured = [mean_phase_s(r, phase) for r in rs]
        m = float(np.mean(measured))
        # one set of draws for the three laws: the capacity variants' batches are those of
        # the capacity-64 runs of their (G, B), and a batch held twice counts once
        feats = drawn_features(fit_runs, G, B, k, capacity, draws)
        if plan == 2:
            preds = {
                "law": float(law_phase_s(law, feats, phase).mean()),
                "law_c64_fit": float(law_phase_s(law_c64, feats, phase).mean()),
                "law_v1": float(law_phase_s(law_v1, feats, phase).mean()),
            }
        else:  # the law on plan 3's draw, plan 2's beside it
            groups_feats = feats
            feats = drawn_features(fit_runs, G, B, k, capacity, draws, draw="prompts")
            preds = {
                "law": float(law_phase_s(law, feats, phase).mean()),
                "law_plan2_draw": float(law_phase_s(law, groups_feats, phase).mean()),
            }
        preds |= {
            "law_own_features": float(
                np.mean([law_phase_s(law, r.features, phase).mean() for r in rs])
            ),
            "power_law": float(power[0] + busy_time(power, G * B)),
            "linear": float(np.polyval(line, G * B)),
            "constant": level,
        }
        preds = {name: preds[name] for name in (RULES2 if plan == 2 else RULES3)}
        role = ("fit setting" if s in fit_set else
                "held out" if s in held_set else "held out, beyond target")  # fmt: skip
        row = {"G": G, "B": B, "capacity": capacity, "seed": seed, "rollouts": G * B,
               "role": role, "passes": len(rs), "steps": k, "measured_s": m,
               "pass_spread": abs(measured[0] - measured[-1]) / m if len(rs) > 1 else None,
               "probe_model_ms": 1000 * float(np.median(np.concatenate(
                   [probe_model(d, k) for d in dirs[s]])))}  # fmt: skip
        # both passes draw the same rollouts: their work is one, their clocks two
        work = [training_work(r.features) for r in rs]
        row.update({key: float(np.mean([w[key] for w in work])) for key in work[0]})
        cells = sum(float(r.features["cells"].sum()) for r in rs)
        row["train_us_per_padded_token"] = (
            1e6 * sum(float(r.cpu["train"].sum()) for r in rs) / cells if cells else None
        )
        row.update({f"drawn_{key}": v for key, v in training_work(feats).items()})
        if plan == 3:
            row.update({f"plan2_drawn_{key}": v for key, v in training_work(groups_feats).items()})
        for name, v in preds.items():
            row[f"{name}_s"] = v
            row[f"{name}_error"] = (v - m) / m
        rows.append(row)
    table = pl.DataFrame(rows).sort("rollouts", "G", "capacity")
    doc = {"plan": plan, "phase": phase, "law": dataclasses.asdict(law),
           **({"law_c64_fit": dataclasses.asdict(law_c64), "law_v1": dataclasses.asdict(law_v1)}
              if plan == 2 else {"kept_share": dataclasses.asdict(fit_kept_share(fit_runs))}),
           "power_law": {"c0_s": power[0], "c1_s": power[1], "p": power[2]},
           "linear": {"c0_s": float(line[1]), "c1_s_per_rollout": float(line[0])},
           "constant_s": level, "fit_runs": [f"{d.parent.name}/{d.name}" for s in
                                             fit_set for d in dirs[s]],
           "steps_per_run": k, "draws": draws,
           "probe_model_ms_per_pass": {p.name: 1000 * float(np.median(np.concatenate(
               [probe_model(p / plan2_runs.run_name(*s), k) for s in runs
                if (p / plan2_runs.run_name(*s)).exists()]))) for p in passes}}  # fmt: skip
    return table, doc


def head_curve(curve, steps: int):
    """A :class:`RunCurve`'s first ``steps`` steps."""
    return dataclasses.replace(curve, G=curve.G[:steps], lr=curve.lr[:steps],
                               counts=curve.counts[:steps])  # fmt: skip


def probe_model(run_dir: Path, steps: int) -> np.ndarray:
    """(steps,) the run's per-step speed probe (``timing_s/probe_model``, CPU s)."""
    rows = [json.loads(line) for line in (run_dir / "learner.jsonl").open()][:steps]
    return np.array([r["timing_s/probe_model"] for r in rows], float)


NAMES2 = ("law", "law, capacity-64 fit", "law, own features", "v1 law", "power law", "linear",
          "constant")  # fmt: skip


def markdown2(
    table: pl.DataFrame,
    phase: str = "step",
    rules: tuple[str, ...] = RULES2,
    names: tuple[str, ...] = NAMES2,
    verdict: bool = True,
) -> str:
    """Plan 2's (or 3's: ``rules``, their ``names``) table as docs markdown (CPU ms per
    step, errors in %) and, with ``verdict``, plan 2's verdict; ``phase`` other than
    ``"step"`` (:func:`plan2`): that phase's; ``"train"`` adds the learner's work per
    setting (own / drawn, and plan 2's draw where the table has it) and the log-log slopes
    of :func:`training_slopes`."""
    whole, learner = phase == "step", phase == "train"
    both = "plan2_drawn_trained_rollouts" in table.columns
    drawn = "v3 drawn / plan-2 drawn" if both else "drawn"
    work = ("" if not learner else f"trained rollouts N (own / {drawn}) | padded length T "
            f"(own / {drawn}) | µs per padded token | ")  # fmt: skip
    what = "measured ms" if whole else f"measured {phase} ms"
    head = (f"| G | B | capacity | seed | rollouts | role | {work}{what} (pass spread) | "
            + " | ".join(names) + " |\n|" + "---|" * (7 + 3 * learner + len(names))
            + "\n")  # fmt: skip
    lines = []
    for r in table.iter_rows(named=True):
        spread = "-" if r["pass_spread"] is None else f"{100 * r['pass_spread']:.1f} %"
        cells = [f"{1000 * r[k + '_s']:.0f} ({100 * r[k + '_error']:+.1f} %)" for k in rules]
        n2 = f" / {r['plan2_drawn_trained_rollouts']:.1f}" if both else ""
        t2 = f" / {r['plan2_drawn_padded_length']:.1f}" if both else ""
        done = "" if not learner else (
            f"{r['trained_rollouts']:.1f} / {r['drawn_trained_rollouts']:.1f}{n2} | "
            f"{r['padded_length']:.1f} / {r['drawn_padded_length']:.1f}{t2} | "
            + ("-" if r["train_us_per_padded_token"] is None  # nothing trained
               else f"{r['train_us_per_padded_token']:.1f}") + " | ")  # fmt: skip
        lines.append(f"| {r['G']} | {r['B']} | {r['capacity']} | {r['seed']} | {r['rollouts']} "
                     f"| {r['role']} | {done}{1000 * r['measured_s']:.0f} ({spread}) | "
                     + " | ".join(cells) + " |")  # fmt: skip
    text = head + "\n".join(lines) + "\n\n"
    for role in ("held out", "held out, beyond target"):
        part = table.filter(pl.col("role") == role)
        if not part.height:
            continue
        pooled = ", ".join(f"{n} {100 * part[k + '_error'].abs().mean():.1f} %"
                           for k, n in zip(rules, names, strict=True))  # fmt: skip
        floor = part["pass_spread"].drop_nulls()
        floor_s = f"{100 * floor.mean():.1f} %" if floor.len() else "-"
        text += f"Mean |error|, {role} ({part.height}): {pooled}; floor {floor_s}\n\n"
    if phase == "train":
        text += training_slopes(table)
    held = table.filter(pl.col("role") == "held out")
    if held.height and verdict:
        err = held["law_error"].abs()
        met = bool((err <= 0.10).all())
        best = min(NAIVE, key=lambda k: held[k + "_error"].abs().mean())
        beats = bool(err.mean() < held[best + "_error"].abs().mean())
        closer = [f"({r['G']}, {r['B']}): {n}" for r in held.iter_rows(named=True)
                  for k, n in zip(NAIVE, ("power law", "linear", "constant"), strict=True)
                  if abs(r[k + "_error"]) < abs(r["law_error"])]  # fmt: skip
        claim = ("Target (|law error| <= 10 % at each 256-rollout setting)" if whole else
                   f"The {phase} phase alone at plan 2's held-out settings (already scored on "
                   "the whole step: a breakdown, not a new test); |law error| <= 10 % at "
                   "each 256-rollout setting")  # fmt: skip
        text += (
            f"{claim}: {'met' if met else 'not met'}. Beats the best naive rule ({best}) on "
            f"the mean: {'yes' if beats else 'no'}. Rows where a naive rule is closer: "
            f"{', '.join(closer) if closer else 'none'}.\n"
        )
    return text


def training_slopes(table: pl.DataFrame) -> str:
    """One markdown line: on the fit settings at the held-out settings' capacity (those the
    power law is fitted on), the log-log least-squares slope against the rollouts ``B G``
    of the measured training CPU s and of the trained rollouts ``N``, the padded length
    ``T`` and the padded tokens ``N T`` (columns of :func:`plan2`'s table), each through
    its per-setting means; "-" where a column is not positive or there are fewer than two
    rollout counts."""
    held = table.filter(pl.col("role") == "held out")["capacity"].unique()
    fit = table.filter((pl.col("role") == "fit setting") & pl.col("capacity").is_in(held.to_list()))
    x = np.log(fit["rollouts"].to_numpy().astype(float))
    cols = (("measured_s", "training CPU s"), ("trained_rollouts", "N"),
            ("padded_length", "T"), ("padded_tokens", "N T"))  # fmt: skip

    def slope(c: str) -> str:
        y = fit[c].to_numpy().astype(float)
        if len(np.unique(x)) < 2 or (y <= 0).any():
            return "-"
        return f"{np.polyfit(x, np.log(y), 1)[0]:.2f}"

    where = "/".join(str(c) for c in held.sort())
    slopes = ", ".join(f"{name} {slope(c)}" for c, name in cols)
    return (
        f"Log-log slope against the rollouts B G on the {fit.height} capacity-{where} fit "
        f"settings: {slopes}.\n\n"
    )


def markdown(table: pl.DataFrame) -> str:
    """The table as docs markdown: CPU ms per step and errors in %."""
    head = ("| G | B | rollouts | role | measured ms (pass spread) | law | law, own features | "
            "power law | linear | constant |\n|---|---|---|---|---|---|---|---|---|---|\n")  # fmt: skip
    lines = []
    for r in table.iter_rows(named=True):
        spread = "-" if r["pass_spread"] is None else f"{100 * r['pass_spread']:.0f} %"
        cells = [f"{1000 * r[k + '_s']:.0f} ({100 * r[k + '_error']:+.0f} %)" for k in RULES]
        lines.append(f"| {r['G']} | {r['B']} | {r['rollouts']} | {r['role']} | "
                     f"{1000 * r['measured_s']:.0f} ({spread}) | " + " | ".join(cells) + " |")  # fmt: skip
    held = table.filter(pl.col("role") == "held out")
    pooled = ", ".join(f"{k.replace('_', ' ')} {100 * held[k + '_error'].abs().mean():.1f} %"
                       for k in RULES) if held.height else "-"  # fmt: skip
    return head + "\n".join(lines) + f"\n\nMean |error| over the held-out settings: {pooled}\n"


if __name__ == "__main__":
    sys.exit(main())
