"""Real stability grids: asynchronous GRPO over (S, lr, seed), collapse outcome per run.

Each grid point is one :func:`real.runners.async_loop.run_async` run with ``interval:S`` (the
staleness paper's sync-interval setting, PAPERS.md §2: weights pushed every ``S`` learner
steps, ``M = T / S``) or ``bounded:S``, stopped at its first collapse. Every run loads the
same warm start, trained once in ``DIR/warmstart`` (a symlink in each run directory).
Runs go to ``jobs`` worker processes (each run is itself two processes: learner and
generator). A finished run (its ``collapse.json`` exists) is not run again, so an
interrupted grid continues where it stopped.

CSV columns (``DIR/stability.csv``): the simulator's ``S, lr, seed, collapsed, t_collapse,
M_collapse, regime, cos_sim_mean`` (same meanings, :mod:`sim.models.staleness`), then
``failure`` (criterion that fired, :mod:`real.runners.collapse`), ``steps_done``, ``reward_first``
/ ``reward_last`` (mean over the first / last 5 steps trained), ``kl_max``,
``staleness_max`` and ``wall_s``.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import math
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import torch.multiprocessing as mp
from rolloutlab.real.rundir.async_config import AsyncConfig
from rolloutlab.real.rundir.config import (
    LearnerConfig,
    SyncConfig,
    WarmStartConfig,
    with_earlier_keys,
)
from rolloutlab.real.runners.collapse import CollapseConfig
from rolloutlab.sim.studies.stability import OUTCOME_COLUMNS, OUTCOME_SCHEMA
from rolloutlab.sim.trace.progress import progress_bar

CSV_COLUMNS = [
    *OUTCOME_COLUMNS,
    "steps_done",
    "reward_first",
    "reward_last",
    "kl_max",
    "staleness_max",
    "wall_s",
]
BALLISTIC_COS = 0.5
"""Mean successive-update cosine at or above which a run is called ballistic (the simulator's
default, :attr:`sim.models.staleness.StalenessParams.ballistic_cos`)."""


@dataclass(frozen=True)
class GridConfig:
    """One real stability grid."""

    S_values: tuple[int, ...] = (1, 2, 4, 8)
    """Staleness parameters S (``interval:S`` or ``bounded:S``)."""
    lrs: tuple[float, ...] = (1e-4, 1e-3, 1e-2)
    """Learning rates."""
    seeds: int = 3
    """Seeds per (S, lr): run seeds ``seed_offset .. seed_offset+seeds-1`` (prompts, sampling,
    minibatch order)."""
    mode: str = "interval"
    """``interval`` or ``bounded``."""
    jobs: int = 2
    """Runs at a time."""
    base: AsyncConfig = dataclasses.field(default_factory=AsyncConfig)
    """Settings of every run (steps, batch, controller, warm start...); pipeline, lr and seed are set per run."""
    seed_offset: int = 0
    """First seed (>= 0): a later grid with ``seed_offset=4, seeds=4`` adds seeds 4..7 to a
    grid of seeds 0..3 (new runs, not reruns)."""

    def __post_init__(self) -> None:
        if (
            self.mode not in ("interval", "bounded")
            or self.seeds < 1
            or self.jobs < 1
            or self.seed_offset < 0
        ):
            raise ValueError(
                "GridConfig: need mode interval|bounded, seeds >= 1, jobs >= 1, "
                f"seed_offset >= 0; got {self}"
            )
        if not self.S_values or not self.lrs or min(self.S_values) < 0 or not min(self.lrs) > 0:
            raise ValueError(
                f"GridConfig: need S >= 0 and lr > 0 lists, got S={self.S_values}, lr={self.lrs}"
            )

    @property
    def seed_values(self) -> range:
        """The seeds of every (S, lr): ``seed_offset .. seed_offset + seeds - 1``."""
        return range(self.seed_offset, self.seed_offset + self.seeds)

    def run_config(self, S: int, lr: float, seed: int) -> AsyncConfig:
        """The :class:`AsyncConfig` of one grid point (stops at collapse)."""
        sync = dataclasses.replace(
            self.base.sync, seed=seed, learner=dataclasses.replace(self.base.sync.learner, lr=lr)
        )
        pipeline = f"{self.mode}:{S}"  # interval:0|1 and bounded:0 are the synchronous pipeline
        return dataclasses.replace(self.base, sync=sync, pipeline=pipeline, stop_on_collapse=True)


def stability_grid(
    S_values: Sequence[int],
    lrs: Sequence[float],
    seeds: int,
    mode: str,
    jobs: int,
    seed_offset: int,
    *,
    controller: str,
    steps: int,
    prompts: int,
    warm_start_steps: int,
    learner: LearnerConfig,
    collapse: CollapseConfig,
) -> GridConfig:
    """The grid ``rolloutlab real stability`` runs: every run ``steps`` learner steps at
    ``prompts`` prompts under ``controller``, evaluated (64 held-out problems) and
    checkpointed once, at its last step, after ``warm_start_steps`` supervised steps.
    Raises ConfigError or ValueError naming the setting."""
    sync = SyncConfig(
        controller=controller,
        steps=steps,
        prompts=prompts,
        eval_every=steps,
        eval_size=64,
        checkpoint_every=steps,
        # no refill in these grids: the cap is unused, and 0 keeps the spec (--resume)
        # of grids made while 0 was the default
        max_gen_batches=0,
        warm_start=WarmStartConfig(steps=warm_start_steps),
        learner=learner,
    )
    base = AsyncConfig(sync=sync, collapse=collapse)
    return GridConfig(tuple(S_values), tuple(lrs), seeds, mode, jobs, base, seed_offset)


def grid_specs(grid: GridConfig) -> tuple[dict, dict]:
    """``(spec, earlier)``: the grid's identity in its results folder (``jobs`` left out,
    as it is not a result; ``seed_offset`` only when set, so a grid from before it keeps
    its spec), and the same with the run config's earlier key names, so a grid stored
    before a rename resumes (:func:`real.rundir.config.with_earlier_keys`)."""
    spec = dataclasses.asdict(dataclasses.replace(grid, jobs=1))
    if not grid.seed_offset:
        del spec["seed_offset"]
    return spec, {**spec, "base": with_earlier_keys(spec["base"])}


def run_dir(out: Path, S: int, lr: float, seed: int) -> Path:
    """``out/runs/S{S}_lr{lr:g}_seed{seed}``."""
    return Path(out) / "runs" / f"S{S}_lr{lr:g}_seed{seed}"


def _one(args: tuple) -> dict:
    """Worker: run (or reuse) one grid point; returns its CSV row."""
    out, S, lr, seed, acfg = args
    from rolloutlab.real.runners.async_loop import run_async  # torch imported in the worker

    d = run_dir(out, S, lr, seed)
    if not (d / "collapse.json").exists():
        shutil.rmtree(d, ignore_errors=True)  # an interrupted run: start it again
        d.mkdir(parents=True)
        (d / "warmstart").symlink_to((Path(out) / "warmstart").resolve(), target_is_directory=True)
        t0 = time.perf_counter()
        run_async(acfg, d, progress=False)
        (d / "wall_s.txt").write_text(f"{time.perf_counter() - t0}\n")
    return summarize_run(d, S, lr, seed)


def summarize_run(d: Path, S: int, lr: float, seed: int) -> dict:
    """The CSV row of a finished run directory (``collapse.json``, ``steps.parquet``, ``rollouts.parquet``)."""
    outcome = json.loads((d / "collapse.json").read_text())
    steps = pl.read_parquet(d / "steps.parquet").sort("step")
    rollouts = pl.read_parquet(d / "rollouts.parquet")
    t_c = outcome["t_collapse"]
    upto = steps if t_c is None else steps.filter(pl.col("step") < t_c)
    cos = upto["grad_cosine"].drop_nulls().drop_nans()
    cos_mean = float(cos.mean()) if cos.len() else math.nan
    regime = (
        "undetermined"
        if not cos.len()
        else ("ballistic" if cos_mean >= BALLISTIC_COS else "diffusive")
    )
    wall = d / "wall_s.txt"
    return {
        "S": S,
        "lr": lr,
        "seed": seed,
        "collapsed": bool(outcome["collapsed"]),
        "t_collapse": t_c,
        "M_collapse": outcome["weight_pushes_to_collapse"],
        "regime": regime,
        "cos_sim_mean": cos_mean,
        "failure": outcome["failure"],
        "steps_done": steps.height,
        "reward_first": float(steps["reward_mean"].head(5).mean()),
        "reward_last": float(steps["reward_mean"].tail(5).mean()),
        "kl_max": float(steps["kl"].drop_nulls().max() or math.nan),
        "staleness_max": int((rollouts["learner_version"] - rollouts["policy_version"]).max()),
        "wall_s": float(wall.read_text()) if wall.exists() else math.nan,
    }


def prepare_warm_start(out: Path, base: AsyncConfig, cache_dir: Path | None = None) -> None:
    """Train (or load) the shared warm start in ``out/warmstart`` once, before the grid.

    ``cache_dir``: the shared warm-start cache (:func:`real.policy.warmstart.default_cache_dir`;
    None: neither read nor written), so a second grid with the same model, task, warm-start
    settings and held-out set copies the first one's model instead of retraining it
    (``out/warmstart/warmstart.json`` then says ``source: cache``). Raises ValueError on an
    unreadable model directory (:func:`real.policy.warmstart.cached_warm_start`)."""
    from rolloutlab.real.policy.model import load_config
    from rolloutlab.real.policy.warmstart import cached_warm_start

    cfg = base.sync
    ops = cfg.task_ops
    exclude = frozenset(p.prompt_text for p in ops.heldout(cfg.eval_size))
    cached_warm_start(Path(out), load_config(), ops, cfg.warm_start, exclude, cache_dir)


CSV_SCHEMA = {
    **OUTCOME_SCHEMA,
    "steps_done": pl.Int64,
    "reward_first": pl.Float64,
    "reward_last": pl.Float64,
    "kl_max": pl.Float64,
    "staleness_max": pl.Int64,
    "wall_s": pl.Float64,
}
"""Polars types of :data:`CSV_COLUMNS`."""


def run_point(point: dict, out: str | Path, grid: GridConfig) -> pl.DataFrame:
    """One grid point ``{"S", "lr", "seed"}`` run (or reused) under ``out`` (after
    :func:`prepare_warm_start`), as a one-row table of :data:`CSV_COLUMNS`: the unit an
    executor runs (rolloutlab/commands/grid/executor.py)."""
    S, lr, seed = int(point["S"]), float(point["lr"]), int(point["seed"])
    row = _one((Path(out), S, lr, seed, grid.run_config(S, lr, seed)))
    return pl.DataFrame([row], schema=CSV_SCHEMA).select(CSV_COLUMNS)


def grid_points(grid: GridConfig) -> list[dict]:
    """The points of ``grid`` in run order: ``{"S", "lr", "seed"}`` dicts."""
    return [
        {"S": S, "lr": lr, "seed": seed}
        for S in grid.S_values
        for lr in grid.lrs
        for seed in grid.seed_values
    ]


def run_grid(grid: GridConfig, out: str | Path, progress: bool = False) -> pl.DataFrame:
    """Run every (S, lr, seed) of ``grid`` under ``out``; one row per run (:data:`CSV_COLUMNS`)."""

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    prepare_warm_start(out, grid.base)
    points = [(S, lr, seed) for S in grid.S_values for lr in grid.lrs for seed in grid.seed_values]
    args = [(out, S, lr, seed, grid.run_config(S, lr, seed)) for S, lr, seed in points]
    with cf.ProcessPoolExecutor(grid.jobs, mp_context=mp.get_context("spawn")) as ex:
        rows = list(
            progress_bar(
                ex.map(_one, args),
                total=len(args),
                enabled=progress,
                desc="real stability",
                unit="run",
            )
        )
    return pl.DataFrame(rows, schema=CSV_SCHEMA).select(CSV_COLUMNS)
