"""The answers of the studies that compare settings: ``sim`` (controllers), ``sweep``
(grid points), ``advise`` (searched settings), ``stability`` (staleness x learning rate).
Each marks its best row where one is best."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from rolloutlab.analysis.figures import numbers as fmt
from rolloutlab.analysis.figures.answers.base import Answer, best_flags, need_columns, read_table


def sim_answer(study: Path, cfg: dict) -> Answer:
    """``rolloutlab sim``: which controller reaches the target first (else: the shortest
    wall clock), with each one's straggler rate and mean G."""
    path = study / "summary.csv"
    df = read_table(path)
    need_columns(df, path, "controller", "wall_clock_s")
    several_pipelines = "pipeline" in df.columns and df["pipeline"].n_unique() > 1
    label = ["controller", "pipeline"] if several_pipelines else ["controller"]
    target = cfg.get("target_reward")
    has_ttt = "time_to_target_s" in df.columns and df["time_to_target_s"].is_not_null().any()
    cols = [*label, *(["time_to_target_s"] if has_ttt else []), "wall_clock_s",
            *(c for c in ("straggler_rate", "mean_G", "rollouts", "final_reward") if c in df.columns)]  # fmt: skip
    table = df.select(cols)
    key = "time_to_target_s" if has_ttt else "wall_clock_s"
    best = best_flags(table[key].to_list())
    names = [" ".join(str(r[c]) for c in label) for r in table.iter_rows(named=True)]
    order = sorted((v, n) for v, n in zip(table[key].to_list(), names) if v is not None and v == v)
    win_value, win = order[0]
    row = table.row(names.index(win), named=True)
    steps = df["steps"][0] if "steps" in df.columns else None
    if has_ttt:
        lead = f"{win} reaches reward {fmt.setting(target)} first: {fmt.duration(win_value)}"
    else:
        lead = (
            f"No controller reached the target reward {fmt.setting(target)} in "
            f"{fmt.number(steps)} steps; {win} has the shortest wall clock, "
            f"{fmt.duration(win_value)}"
            if target is not None
            else f"{win} has the shortest wall clock: {fmt.duration(win_value)}"
        )
    if len(order) > 1:
        second_value, second = order[1]
        lead += (
            f", {fmt.percent(1 - win_value / second_value)} % before {second} "
            f"({fmt.duration(second_value)})"
        )
    if "straggler_rate" in row and "mean_G" in row:
        lead += (
            f"; its straggler rate is {fmt.percent(row['straggler_rate'])} % at a mean G of "
            f"{fmt.number(row['mean_G'])}"
        )
    lead += "."
    never = [n for v, n in zip(table[key].to_list(), names) if v is None or v != v]
    if never and has_ttt:
        lead += f" Never reached the target: {', '.join(never)}."
    tau = cfg.get("tau")
    notes = ["best: " + ("first to the target reward" if has_ttt else "shortest wall clock")]
    if tau is not None:
        notes.append(
            f"straggler rate: share of steps with max/median length above tau = {fmt.setting(tau)}"
        )
    return Answer(
        "Which group-size controller trains fastest, and how often does a straggler hold up a step?",
        lead,
        table,
        best,
        tuple(notes),
    )


def sweep_answer(study: Path, cfg: dict) -> Answer:
    """``rolloutlab sweep``: the best grid point per controller (first to the target
    where a run reached it, else the most tokens/s), mean over seeds."""
    path = study / "means.csv"
    df = read_table(path)
    need_columns(df, path, "controller", "prompts", "workers", "wall_clock_s", "tokens_per_s")
    has_ttt = "time_to_target_s" in df.columns and df["time_to_target_s"].is_not_null().any()
    axes = [c for c in ("prompts", "workers", "max_num_seqs") if c in df.columns]
    if has_ttt:
        ranked = df.filter(pl.col("time_to_target_s").is_not_null()).sort("time_to_target_s")
        criterion = "the shortest time to the target reward"
    else:
        ranked = df.sort("tokens_per_s", descending=True)
        criterion = "the most tokens/s (no run reached the target reward)"
    best_rows = ranked.unique("controller", keep="first", maintain_order=True)
    extra = [c for c in ("wall_clock_s_sd", "straggler_rate", "mean_G", "seeds") if c in df.columns]
    cols = ["controller", *axes, *(["time_to_target_s"] if has_ttt else []), "wall_clock_s",
            "tokens_per_s", *extra]  # fmt: skip
    table = best_rows.select(cols)
    first = table.row(0, named=True)
    where = ", ".join(f"{fmt.header(a)} = {fmt.number(first[a])}" for a in axes)
    value = (
        fmt.duration(first["time_to_target_s"])
        if has_ttt
        else f"{fmt.number(first['tokens_per_s'])} tokens/s"
    )
    lead = f"Best point: {first['controller']} at {where}: {value}"
    if table.height > 1:
        second = table.row(1, named=True)
        other = (
            fmt.duration(second["time_to_target_s"])
            if has_ttt
            else f"{fmt.number(second['tokens_per_s'])} tokens/s"
        )
        lead += f"; the next controller, {second['controller']}, at best {other}"
    points = df.select(axes).unique().height
    lead += f" ({points} grid points, mean over seeds)."
    return Answer(
        "Which grid point (prompt batch B, workers, max_num_seqs) suits each controller best?",
        lead,
        table,
        tuple(i == 0 for i in range(table.height)),
        (f"one row per controller: its point with {criterion}",),
    )


SETTINGS = ("controller", "prompts", "workers", "max_num_seqs", "pipeline", "split", "lr",
            "updates_per_batch")  # fmt: skip
"""The columns of ``advise``'s trials.csv that name a searched setting."""


def _objective(cfg: dict) -> tuple[str, str, str]:
    """``(column, question, phrase)`` of an ``advise`` study's objective (its config's
    ``objective``: ``time_to_target_s``, ``time_per_step_s``, or ``gpu_hours of ...``):
    the trials.csv column it minimises, the question it answers and a format string
    that words one value ``{v}``."""
    objective = str(cfg.get("objective", "time_to_target_s"))
    per_step = objective.endswith("time_per_step_s")
    target = fmt.setting(cfg.get("target_reward"))
    aim = "the shortest time per step" if per_step else f"reward {target} fastest"
    if objective.startswith("gpu_hours"):
        what = "per step" if per_step else f"to reward {target}"
        return ("gpu_hours", f"Which setting needs the fewest GPU-hours {what} without "
                "stragglers or collapse?", "{v} " + what)  # fmt: skip
    verb = "has" if per_step else "reaches"
    return (
        objective,
        f"Which setting {verb} {aim} without stragglers or collapse?",
        "{v} per step" if per_step else "{v} to reward " + target,
    )


def advise_answer(study: Path, cfg: dict) -> Answer:
    """``rolloutlab advise``: the recommended setting and the runner-up, with their
    straggler and collapse margins and the gap between them in the study's objective
    (time to the target, time per step, or GPU-hours of either)."""
    path = study / "trials.csv"
    df = read_table(path)
    objective, question, phrase = _objective(cfg)
    need_columns(df, path, "feasible", "best", objective, "straggler_rate", "collapse_margin")
    settings = [c for c in SETTINGS if c in df.columns]
    space = cfg.get("space") or {}
    # the settings the search chose among: more than one value searched, or (no space in
    # the config) more than one value tried
    searched = [
        c for c in settings
        if (len(space[c]) > 1 if c in space else df[c].n_unique() > 1)
    ] or settings[:1]  # fmt: skip

    def value(v) -> str:
        return f"{fmt.number(v)} GPU-hours" if objective == "gpu_hours" else fmt.duration(v)

    feasible = (
        df.filter(pl.col("feasible") & pl.col(objective).is_not_null())
        .unique(settings, keep="first", maintain_order=True)
        .sort(objective)
    )
    cons = cfg.get("constraints", {}) or {}
    max_rate, min_margin = cons.get("max_straggler_rate"), cons.get("min_collapse_margin")
    cols = ["rank", *searched, objective, "straggler_rate", "collapse_margin"]
    if feasible.height == 0:
        table = df.sort(objective).head(2).with_columns(pl.lit(None).alias("rank")).select(cols)
        return Answer(
            question,
            f"No trial met the constraints (straggler rate at most {fmt.percent(max_rate)} %, "
            f"collapse margin at least {fmt.setting(min_margin)}); the two best trials by "
            "the objective are shown.",
            table,
            (False, False),
        )
    top = feasible.head(2).with_row_index("rank", offset=1).select(cols)
    rec = top.row(0, named=True)
    lead = (
        f"Recommended: {_setting(rec, searched)}: "
        f"{phrase.format(v=value(rec[objective]))}, straggler rate "
        f"{fmt.percent(rec['straggler_rate'])} % (bound {fmt.percent(max_rate)} %), collapse "
        f"margin {fmt.number(rec['collapse_margin'])} (needs {fmt.setting(min_margin)})."
    )
    if top.height > 1:
        run = top.row(1, named=True)
        more = "more" if objective == "gpu_hours" else "slower"
        lead += (
            f" Runner-up: {_setting(run, searched)}, {value(run[objective])} "
            f"({fmt.percent(run[objective] / rec[objective] - 1)} % {more})."
        )
    fixed = [c for c in settings if c not in searched and df[c].n_unique() == 1]
    notes = [
        f"{feasible.height} of {df.height} trials met the constraints; margins: straggler rate "
        f"against its bound, collapse margin = eta_max / eta (safe above "
        f"{fmt.setting(min_margin)})"
    ]
    if fixed:
        notes.append(
            "the same in every trial: "
            + ", ".join(f"{fmt.header(c)} {_value(c, df[c][0])}" for c in fixed)
        )
    # what advise printed under its answer: the assumptions and the ties (config.json)
    notes += [str(line).strip() for line in (cfg.get("caveats") or {}).get("lines", [])]
    return Answer(question, lead, top, (True, False)[: top.height], tuple(notes))


def _value(column: str, v) -> str:
    return fmt.setting(v) if column == "lr" else str(v)


def _setting(r: dict, keys: list[str]) -> str:
    """The settings ``keys`` of trial ``r`` in words, e.g. ``static:8, B = 64, split 48:16``."""
    words = {
        "prompts": lambda v: f"B = {v}",
        "workers": lambda v: f"{v} worker{'s' if v != 1 else ''}",
        "max_num_seqs": lambda v: f"max_num_seqs {v}",
        "split": lambda v: f"split {v}",
        "lr": lambda v: f"lr {fmt.setting(v)}",
        "updates_per_batch": lambda v: f"K = {v}",
    }
    return ", ".join(words.get(k, str)(r[k]) for k in keys)


def stability_answer(study: Path, cfg: dict) -> Answer:
    """``rolloutlab stability``: per staleness S, the largest learning rate at which no
    seed collapsed and the smallest at which half of them did, beside the closed-form
    eta_max."""
    path = study / "stability.csv"
    df = read_table(path)
    need_columns(df, path, "S", "lr", "collapsed", "t_collapse")
    cell = (
        df.group_by("S", "lr")
        .agg(
            pl.col("collapsed").mean().alias("collapsed_share"),
            pl.col("t_collapse").median().alias("median_t_collapse"),
            *([pl.col("eta_max_pred").first()] if "eta_max_pred" in df.columns else []),
        )
        .sort("S", "lr")
    )
    rows = []
    for (s,), g in cell.group_by("S", maintain_order=True):
        safe = g.filter(pl.col("collapsed_share") == 0)["lr"].max()
        half = g.filter(pl.col("collapsed_share") >= 0.5).sort("lr").head(1)
        rows.append(
            {
                "S": s,
                "largest_safe_lr": safe,
                "collapse_lr": half["lr"][0] if half.height else None,
                "median_t_collapse": half["median_t_collapse"][0] if half.height else None,
                **({"eta_max_pred": g["eta_max_pred"][0]} if "eta_max_pred" in g.columns else {}),
            }
        )
    table = pl.DataFrame(rows).sort("S")
    seeds = df["seed"].n_unique() if "seed" in df.columns else None
    steps = cfg.get("steps")
    collapsing = table.filter(pl.col("collapse_lr").is_not_null())
    if collapsing.height == 0:
        lead = (
            f"No setting collapsed: every S up to {fmt.number(table['S'].max())} is safe up to "
            f"lr {fmt.setting(df['lr'].max())}"
        )
    else:
        first = collapsing.row(0, named=True)
        lead = (
            f"Collapse sets in from lr {fmt.setting(first['collapse_lr'])} at S = {first['S']}"
            + "".join(
                f", {fmt.setting(r['collapse_lr'])} at S = {r['S']}"
                for r in collapsing.iter_rows(named=True)
                if r["S"] != first["S"]
            )
        )
        stable = table.filter(pl.col("collapse_lr").is_null())["S"].to_list()
        if stable:
            lead += f"; S = {', '.join(map(str, stable))} never collapses in the grid"
    lead += (
        f" ({fmt.number(steps)} steps, {seeds} seeds per cell)." if steps else f" ({seeds} seeds)."
    )
    return Answer(
        "At which staleness S and learning rate does asynchronous GRPO collapse?",
        lead,
        table,
        (),
        (
            "largest safe lr: no seed collapsed; collapse lr: the smallest lr at which half "
            "the seeds or more collapsed; eta max pred: the closed-form bound",
        ),
    )
