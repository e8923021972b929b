"""The tail-fix study: static G, SAGC, tail batching, partial rollouts and speculative
decoding (every step and tail-only) on one scenario and prompt stream, ranked by time to
the target reward under the scenario's learning law (docs/pipelines.md "Tail fixes
compared").

Each arm is one :func:`sim.studies.compare.run_comparison` run (same seed, same prompt
stream, same lengths: counter-based draws) of a controller spec and a pipeline, with
speculative decoding on the engine for the two speculative arms
(:func:`sim.scenario.overrides.with_speculative`). Per arm and seed it records the time to
target (s; NaN if never reached), the wall clock, the rollout-seconds spent waiting for a
step's last rollout (:func:`straggler_wait_s`) and the length bias of what was trained on
(``len_consumed_over_generated``); the table gives their mean and spread over seeds, the
wait each arm removes against the first (the baseline) and the rank by mean time to target.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import polars as pl
from rolloutlab.sim.engine.speculative import SpeculativeDecoding
from rolloutlab.sim.pipelines.spec import parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.overrides import with_speculative
from rolloutlab.sim.scenario.scenario import Scenario
from rolloutlab.sim.studies.compare import plan_comparison, run_comparison
from rolloutlab.sim.trace.metrics import consumed


@dataclass(frozen=True)
class Arm:
    """One way of attacking the tail."""

    name: str
    controller: str
    """Controller spec (``static:8``, ``sagc``)."""
    pipeline: str = "sync"
    """Pipeline spec (:func:`sim.pipelines.spec.parse_pipeline`)."""
    speculative: SpeculativeDecoding | None = None
    """Speculative decoding on every worker, or None."""
    park: bool = False
    """``--park``: cut prompts re-run later in a long round (``oversample:R`` only)."""


def default_arms(G: int, speculative: SpeculativeDecoding, tail_below: int) -> list[Arm]:
    """The study's arms at group size ``G``: static G (baseline), SAGC, tail batching
    (``oversample:1.25:group=ceil(1.5 G)/G``, with and without a long round for the cut
    prompts), partial rollouts (``partial:1``), ``speculative`` on every step and only below
    ``tail_below`` running sequences."""
    n = -(-3 * G // 2)
    tb = f"oversample:1.25:group={n}/{G}"
    return [
        Arm(f"static G={G}", f"static:{G}"),
        Arm("SAGC", "sagc"),
        Arm("tail batching (drop)", f"static:{G}", tb),
        Arm("tail batching + long round", f"static:{G}", tb, park=True),
        Arm("partial rollouts", f"static:{G}", "partial:1"),
        Arm(
            "spec decoding, all steps",
            f"static:{G}",
            speculative=replace(speculative, tail_below=None),
        ),
        Arm(
            f"spec decoding, tail < {tail_below}",
            f"static:{G}",
            speculative=replace(speculative, tail_below=tail_below),
        ),
    ]


def straggler_wait_s(rollouts: pl.DataFrame) -> float:
    """Rollout-seconds spent waiting for the straggler: over steps and consumed rollouts,
    ``sum_i (max_j t_finish_j - t_finish_i)`` within a step (the padding waste that
    :func:`sim.trace.metrics.step_metrics`' ``slot_idle_frac`` normalises)."""
    used = consumed(rollouts)
    per = used.group_by("step").agg(
        (pl.col("t_finish").max() * pl.len() - pl.col("t_finish").sum()).alias("wait")
    )
    return float(per["wait"].sum())


def run_tail_study(
    scenario: Scenario,
    cfg: RunConfig,
    arms: Sequence[Arm],
    seeds: Sequence[int],
    target: float | None,
    on_run: Callable[[str, int], None] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Run every arm for every seed (``cfg`` with ``seed`` replaced).

    Returns ``(table, runs)``: ``runs`` one row per (arm, seed); ``table`` one row per arm,
    ranked by mean time to target (arms that never reach it last), with the spread
    (``min``-``max``) over seeds and ``wait_removed_s`` = the first arm's mean straggler
    wait minus this arm's. Raises ValueError for a bad arm (pipeline spec, speculative
    decoding on a non-synchronous pipeline or an engine that cannot speculate).
    """
    pipes = {a.name: parse_pipeline(a.pipeline, park=a.park) for a in arms}
    for a in arms:  # every check before the first run
        if a.speculative is not None:
            with_speculative(scenario, a.speculative, [pipes[a.name]])
    rows = []
    for seed in seeds:
        for a in arms:
            sc = (
                scenario
                if a.speculative is None
                else with_speculative(scenario, a.speculative, [pipes[a.name]])
            )
            run_cfg = replace(cfg, seed=seed)
            plan = plan_comparison(sc, [a.controller], run_cfg, [pipes[a.name]], "simpy", target)
            c = run_comparison(plan)
            summary, rollouts = c.summary, c.rollouts
            s = summary.row(0, named=True)
            rows.append(
                {
                    "arm": a.name,
                    "seed": seed,
                    "time_to_target_s": _num(s.get("time_to_target_s")),
                    "wall_clock_s": float(s["wall_clock_s"]),
                    "straggler_wait_s": straggler_wait_s(rollouts),
                    "len_bias": _num(s.get("len_consumed_over_generated")),
                    "mean_G": float(s["mean_G"]),
                }
            )
            if on_run is not None:
                on_run(a.name, seed)
    runs = pl.DataFrame(rows)
    return rank(runs, [a.name for a in arms]), runs


def rank(runs: pl.DataFrame, order: Sequence[str]) -> pl.DataFrame:
    """Per arm (in ``order``; the first is the baseline): mean and min-max of the run
    columns over seeds, ``wait_removed_s`` and ``rank`` by mean time to target."""
    agg = runs.group_by("arm", maintain_order=True).agg(
        pl.len().alias("seeds"),
        *(pl.col(c).mean().alias(c) for c in ("time_to_target_s", "wall_clock_s")),
        pl.col("time_to_target_s").min().alias("ttt_min_s"),
        pl.col("time_to_target_s").max().alias("ttt_max_s"),
        pl.col("straggler_wait_s").mean(),
        pl.col("len_bias").mean(),
        pl.col("mean_G").mean(),
    )
    base = float(agg.filter(pl.col("arm") == order[0])["straggler_wait_s"][0])
    ttt = agg["time_to_target_s"].to_numpy()
    key = np.where(np.isnan(ttt), np.inf, ttt)
    ranks = np.empty(len(key), dtype=np.int64)
    ranks[np.argsort(key, kind="stable")] = np.arange(1, len(key) + 1)
    return (
        agg.with_columns(
            (base - pl.col("straggler_wait_s")).alias("wait_removed_s"),
            pl.Series("rank", ranks),
        )
        .sort("rank")
        .select(
            "rank",
            "arm",
            "seeds",
            "time_to_target_s",
            "ttt_min_s",
            "ttt_max_s",
            "wall_clock_s",
            "straggler_wait_s",
            "wait_removed_s",
            "len_bias",
            "mean_G",
        )
    )


def _num(v) -> float:
    """A summary value as a float (None -> NaN)."""
    return float("nan") if v is None else float(v)
