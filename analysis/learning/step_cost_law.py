"""A step-cost law built from what a ``real sync`` step does, fitted across rollout counts.

:mod:`analysis.learning.step_cost` prices a step as ``c0 + c1 (B G)^p``; fitted on 16-64
rollouts a step of the graph-walk grid it priced 256 at 0.46 CPU s against 0.74 measured
(docs/learning.md §5). This law prices the work itself (CPU seconds; one step =
generation + training + sync):

- **generation** (:class:`real.engines.torch_engine.TorchEngine`, continuous batching over
  ``capacity`` slots): ``gen = g0 + g_prompt B + g_call I + g_row D + g_att A + g_pre P``.
  ``B`` = the step's prompts (problem sampling and scoring), ``I`` = the engine's forward
  calls (prefill batches + decode iterations), ``D`` = decoded rows (a rollout of response
  length ``L`` takes its first token from its prefill, then ``L - 1`` decode rows), ``A`` =
  attended cache cells (each decode call gathers every running slot's keys and values up
  to the longest running context, ``forward_cached``: running sequences x that window),
  ``P`` = prefill tokens (each prefill call pads its prompts to the longest). ``I``, ``D``,
  ``A`` and ``P`` come from replaying the engine's admission rule on the step's prompt and
  response lengths (:func:`engine_work`). Above ``capacity`` rollouts the step runs in
  waves, so ``I`` grows with the rollouts instead of staying at the longest response.
- **training** (:class:`real.policy.learner.Learner`, one minibatch): the kept groups'
  rollouts (DAPO dynamic sampling drops groups whose rewards are all equal) go through one
  reference forward, one forward + backward and one AdamW step, right-padded to the longest
  prompt + response: ``train = t0 + t_row N + t_cell N T + t_att N T^2``, ``N`` the trained
  rollouts, ``T`` the padded length, ``N T^2`` the attention over the padded batch. ``T`` is
  a maximum over the batch, so it grows with the batch: the padding that makes the cost
  grow faster than the rollouts.
- **sync**: the fit steps' mean.

:data:`GEN_FEATURES` / :data:`TRAIN_FEATURES` are these (plan 2,
``results/step_cost_law/PLAN2.md``); :data:`GEN_FEATURES_V1` / :data:`TRAIN_FEATURES_V1`
the first plan's (no prompts, attended cells or attention term).

Coefficients: non-negative least squares (``scipy.optimize.nnls``) per phase over the fit
runs' steps. **Predicting a setting from (G, B) alone** (:func:`predict_setting`): at each
step ``t`` draw ``B`` groups of ``G`` rollouts from the fit runs' groups at step ``t`` (a
larger group subsampled to ``G``: the same prompt's responses), compute their features,
apply the coefficients, and average over draws and steps. **Modelling choice**: the
lengths and pass rates of step ``t`` are pooled across settings, though a larger batch
learns (and shortens its walks) sooner.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import polars as pl
from rolloutlab.analysis.inputs.run_input import cpu_phases
from rolloutlab.sim.trace import schema as trace
from scipy.optimize import nnls

GEN_FEATURES = ("one", "prompts", "calls", "decoded_rows", "attended_cells", "prefill_tokens")
TRAIN_FEATURES = ("one", "rows", "cells", "attention_cells")
GEN_FEATURES_V1 = ("one", "calls", "decoded_rows", "prefill_tokens")
TRAIN_FEATURES_V1 = ("one", "cells", "rows")
PHASES = ("gen", "train", "sync")
"""A step's phases, as ``learner.jsonl`` times them (``cpu_gen_s``, ``cpu_train_s``,
``cpu_sync_s``)."""


class EngineWork(NamedTuple):
    """One step's generation work (:func:`engine_work`); counts."""

    prefill_calls: int
    decode_iterations: int
    decoded_rows: int
    prefill_tokens: int
    attended_cells: int


def engine_work(
    prompt_tokens: Sequence[int] | np.ndarray,
    response_tokens: Sequence[int] | np.ndarray,
    capacity: int,
) -> EngineWork:
    """One step's generation work, replaying
    :meth:`real.engines.torch_engine.TorchEngine.generate` (continuous mode): requests in
    order; a loop iteration with waiting requests and free slots admits as many as fit
    (one prefill call, its prompts padded to the longest, each gets its first token),
    otherwise every running sequence decodes one token, at position prompt + tokens
    generated - 1, attending to the cache up to the longest running position + 1 (the
    window ``forward_cached`` gathers for every running slot); a sequence finishes when it
    has its response length. Lengths are (n,) ints >= 1, ``capacity`` >= 1.

    Raises ValueError on a response length < 1 or a capacity < 1."""
    prompts = np.asarray(prompt_tokens, int)
    left = np.asarray(response_tokens, int)
    if capacity < 1:
        raise ValueError(f"engine_work: capacity must be >= 1, got {capacity}")
    if left.size and left.min() < 1:
        raise ValueError(f"engine_work: response lengths must be >= 1, got {left.min()}")
    prefills = decodes = decoded = prefill = attended = 0
    nxt = 0
    running = np.empty(0, int)  # tokens still to generate per running sequence
    position = np.empty(0, int)  # where each running sequence's next decode writes
    while nxt < left.size or running.size:
        free = capacity - running.size
        if nxt < left.size and free > 0:
            k = min(free, left.size - nxt)
            prefill += k * int(prompts[nxt : nxt + k].max())
            running = np.concatenate([running, left[nxt : nxt + k] - 1])
            position = np.concatenate([position, prompts[nxt : nxt + k]])
            nxt += k
            prefills += 1
        else:
            decoded += running.size
            attended += running.size * (int(position.max()) + 1)
            running, position = running - 1, position + 1
            decodes += 1
        alive = running > 0
        running, position = running[alive], position[alive]
    return EngineWork(prefills, decodes, decoded, prefill, attended)


def step_features(
    prompt_tokens: np.ndarray,
    response_tokens: np.ndarray,
    kept: np.ndarray,
    capacity: int,
    prompts: int = 0,
) -> dict[str, float]:
    """Both phases' features of one step (module docstring) from its rollouts in request
    order: ``prompt_tokens``, ``response_tokens`` (n,) ints, ``kept`` (n,) bool (trained);
    ``prompts`` the step's prompt batch ``B``."""
    work = engine_work(prompt_tokens, response_tokens, capacity)
    n = int(kept.sum())
    t = int((prompt_tokens + response_tokens)[kept].max()) if n else 0
    return {"one": 1.0, "prompts": prompts,
            "calls": work.prefill_calls + work.decode_iterations,
            "decoded_rows": work.decoded_rows, "attended_cells": work.attended_cells,
            "prefill_tokens": work.prefill_tokens,
            "rows": n, "cells": n * t, "attention_cells": n * t * t}  # fmt: skip


def kept_rollouts(correct: np.ndarray, dynamic_sampling: bool) -> np.ndarray:
    """(B, G) bool: rollouts the learner trains on, from their correctness ``(B, G)``: all,
    or (dynamic sampling) those of groups whose rewards are not all equal."""
    correct = np.asarray(correct, bool)
    if not dynamic_sampling:
        return np.ones_like(correct)
    mixed = np.asarray(correct.any(axis=1) & ~correct.all(axis=1))  # (B,)
    return np.repeat(mixed[:, None], correct.shape[1], axis=1)


@dataclass(frozen=True)
class RunSteps:
    """One run's steps as the law reads them."""

    name: str
    G: int
    B: int
    capacity: int
    groups: list[np.ndarray]
    """Per step, ``(B, G, 3)`` ints: prompt tokens, response tokens, correct."""
    features: pl.DataFrame
    """One row per step: the features of both phases (:func:`step_features`)."""
    cpu: pl.DataFrame
    """One row per step: ``gen, train, sync`` process CPU seconds."""

    def head(self, steps: int) -> RunSteps:
        """The run's first ``steps`` steps."""
        return RunSteps(self.name, self.G, self.B, self.capacity, self.groups[:steps],
                        self.features.head(steps), self.cpu.head(steps))  # fmt: skip


def read_steps(run_dir: str | Path) -> RunSteps:
    """Read a ``real sync`` run (``config.json``, ``rollouts.parquet``, ``learner.jsonl``).

    Raises ValueError (``RunInputError`` or ``FileNotFoundError`` text) naming the file that
    is missing or lacks a field, or a step whose rollouts are not ``B x G``."""
    d = Path(run_dir)
    cfg_path = d / "config.json"
    if not cfg_path.exists():
        raise ValueError(f"{cfg_path}: missing (is this a `rolloutlab real sync` run?)")
    cfg = json.loads(cfg_path.read_text()).get("config", {})
    absent = [k for k in ("prompts", "capacity", "dynamic_sampling") if k not in cfg]
    if absent:
        raise ValueError(f"{cfg_path}: config lacks {', '.join(absent)} "
                         "(is this a `rolloutlab real sync` run?)")  # fmt: skip
    B, capacity, ds = int(cfg["prompts"]), int(cfg["capacity"]), bool(cfg["dynamic_sampling"])
    rollouts = trace.read(d / "rollouts.parquet", "rollouts").sort(
        "step", "prompt_id", "sample_idx"
    )
    groups, feats = [], []
    for (step,), r in rollouts.group_by("step", maintain_order=True):
        G = int(r["group_size"][0])
        if r.height != B * G:
            raise ValueError(f"{d / 'rollouts.parquet'}: step {step} has {r.height} rollouts, "
                             f"expected B x G = {B} x {G}")  # fmt: skip
        cols = [r[c].cast(pl.Int64).to_numpy().reshape(B, G)
                for c in ("prompt_tokens", "response_tokens", "correct")]  # fmt: skip
        groups.append(np.stack(cols, axis=-1))  # (B, G, 3)
        kept = kept_rollouts(cols[2], ds)
        feats.append(step_features(cols[0].ravel(), cols[1].ravel(), kept.ravel(), capacity, B))
    phases = cpu_phases(d, len(groups))
    cpu = pl.DataFrame({"gen": phases["cpu_gen_s"], "train": phases["cpu_train_s"],
                        "sync": phases["cpu_sync_s"]})  # fmt: skip
    return RunSteps(d.name, int(groups[0].shape[1]), B, capacity, groups, pl.DataFrame(feats), cpu)


@dataclass(frozen=True)
class CostLaw:
    """Fitted coefficients (CPU s per unit of each feature)."""

    gen: dict[str, float]
    train: dict[str, float]
    sync_s: float
    dynamic_sampling: bool = True

    def phase_s(self, features: pl.DataFrame, phase: str) -> np.ndarray:
        """(n,) predicted CPU s of one phase (``"gen"``, ``"train"`` or ``"sync"``, as
        ``learner.jsonl``'s ``cpu_{phase}_s``) of steps with ``features`` (one row each).
        Raises ValueError on another phase name."""
        if phase not in PHASES:
            raise ValueError(f"CostLaw.phase_s: phase must be one of {PHASES}, got {phase!r}")
        if phase == "sync":
            return np.full(features.height, self.sync_s)
        coef = self.gen if phase == "gen" else self.train
        total = np.zeros(features.height)
        for k, v in coef.items():
            total = total + features[k].to_numpy() * v
        return total

    def step_s(self, features: pl.DataFrame) -> np.ndarray:
        """(n,) predicted CPU s of steps with ``features`` (one row each): the sum of
        :meth:`phase_s` over :data:`PHASES`."""
        return np.asarray(sum(self.phase_s(features, p) for p in PHASES), float)


def fit_law(
    runs: Sequence[RunSteps],
    gen_features: Sequence[str] = GEN_FEATURES,
    train_features: Sequence[str] = TRAIN_FEATURES,
) -> CostLaw:
    """Non-negative least squares per phase over every step of ``runs`` (module docstring),
    on ``gen_features`` / ``train_features`` (names of :func:`step_features`' keys).
    Raises ValueError when ``runs`` is empty."""
    if not runs:
        raise ValueError("fit_law: no fit runs")
    feats = pl.concat([r.features for r in runs])
    cpu = pl.concat([r.cpu for r in runs])

    def solve(names: Sequence[str], y: np.ndarray) -> dict[str, float]:
        X = feats.select(list(names)).to_numpy().astype(float)
        scale = X.max(axis=0)  # columns of comparable size: nnls is then well conditioned
        scale[scale == 0] = 1.0  # a feature the fit runs never had (no kept group) stays 0
        coef, _ = nnls(X / scale, y)
        return {n: float(c / s) for n, c, s in zip(names, coef, scale, strict=True)}

    return CostLaw(solve(gen_features, cpu["gen"].to_numpy()),
                   solve(train_features, cpu["train"].to_numpy()),
                   float(cpu["sync"].mean()))  # fmt: skip


def predict_setting(
    law: CostLaw,
    runs: Sequence[RunSteps],
    G: int,
    B: int,
    steps: int,
    capacity: int,
    draws: int = 50,
    seed: int = 0,
) -> float:
    """Mean predicted CPU s per step of a run at ``(G, B)`` over ``steps`` steps: ``law``
    applied to :func:`drawn_features` (same arguments). Raises as it does."""
    feats = drawn_features(runs, G, B, steps, capacity, draws, seed, law.dynamic_sampling)
    return float(law.step_s(feats).mean())


def drawn_features(
    runs: Sequence[RunSteps],
    G: int,
    B: int,
    steps: int,
    capacity: int,
    draws: int = 50,
    seed: int = 0,
    dynamic_sampling: bool = True,
) -> pl.DataFrame:
    """``steps x draws`` rows of :func:`step_features` of a run at ``(G, B)`` and
    ``capacity``: at each step ``t``, ``draws`` batches of ``B`` groups drawn from ``runs``'
    groups at step ``t`` (a larger group subsampled to ``G``; module docstring). A step
    batch that several runs hold (one setting at two capacities, or two passes of it: the
    same seeds draw the same rollouts) counts once, so a setting measured more often does
    not weigh more in the draws.

    Raises ValueError when no run has groups of ``G`` or more at some step."""
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(steps):
        batches = [r.groups[t] for r in runs if r.G >= G and t < len(r.groups)]
        pool = list({(g.shape, g.tobytes()): g for g in batches}.values())
        if not pool:
            raise ValueError(f"predict_setting: no fit run has groups of {G} or more at step {t}")
        for _ in range(draws):
            picks = []
            for _ in range(B):
                src = pool[rng.integers(len(pool))]
                grp = src[rng.integers(src.shape[0])]  # (G', 3)
                picks.append(grp[rng.choice(grp.shape[0], G, replace=False)])
            g = np.stack(picks)  # (B, G, 3)
            kept = kept_rollouts(g[..., 2], dynamic_sampling)
            rows.append(
                step_features(g[..., 0].ravel(), g[..., 1].ravel(), kept.ravel(), capacity, B)
            )
    return pl.DataFrame(rows)


def step_clock_law(
    law: CostLaw,
    runs: Sequence[RunSteps],
    G: np.ndarray,
    B: np.ndarray,
    capacity: int,
    draws: int = 20,
    seed: int = 0,
) -> np.ndarray:
    """Predicted ``t_end`` (T,) in CPU s of a run whose steps have group size ``G`` and
    prompts ``B`` ((T,) ints) on ``capacity`` engine slots: the cumulative sum of each
    step's setting's mean predicted cost (:func:`predict_setting` over the steps every run
    of ``runs`` has, ``draws`` draws, one ``seed`` for every setting). Raises as
    :func:`predict_setting` does (no run of ``runs`` has groups of some ``G``)."""
    steps = min(len(r.groups) for r in runs)
    cost: dict[tuple[int, int], float] = {}
    for g, b in {(int(g), int(b)) for g, b in zip(G, B, strict=True)}:
        cost[(g, b)] = predict_setting(law, runs, g, b, steps, capacity, draws, seed)
    return np.cumsum([cost[(int(g), int(b))] for g, b in zip(G, B, strict=True)])
