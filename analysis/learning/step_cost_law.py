"""A step-cost law built from what a ``real sync`` step does, fitted across rollout counts.

:mod:`analysis.learning.step_cost` prices a step as ``c0 + c1 (B G)^p``; fitted on 16-64
rollouts a step of the graph-walk grid it priced 256 at 0.46 CPU s against 0.74 measured
(docs/learning.md §5). This law prices the work itself (CPU seconds; one step =
generation + training + sync):

- **generation** (:class:`real.engines.torch_engine.TorchEngine`, continuous batching over
  ``capacity`` slots): ``gen = g0 + g_call I + g_dec D + g_pre P``. ``I`` = the engine's
  forward calls (prefill batches + decode iterations), ``D`` = decoded rows (a rollout of
  response length ``L`` takes its first token from its prefill, then ``L - 1`` decode
  rows), ``P`` = prefill tokens (each prefill call pads its prompts to the longest). ``I``,
  ``D`` and ``P`` come from replaying the engine's admission rule on the step's prompt and
  response lengths (:func:`engine_work`). Above ``capacity`` rollouts the step runs in
  waves, so ``I`` grows with the rollouts instead of staying at the longest response.
- **training** (:class:`real.policy.learner.Learner`, one minibatch): the kept groups'
  rollouts (DAPO dynamic sampling drops groups whose rewards are all equal) go through one
  reference forward, one forward + backward and one AdamW step, right-padded to the longest
  prompt + response: ``train = t0 + t_cell N T + t_row N``, ``N`` the trained rollouts,
  ``T`` the padded length. ``T`` is a maximum over the batch, so it grows with the batch:
  the padding that makes the cost grow faster than the rollouts.
- **sync**: the fit steps' mean.

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

import numpy as np
import polars as pl
from rolloutlab.analysis.inputs.run_input import cpu_phases
from rolloutlab.sim.trace import schema as trace
from scipy.optimize import nnls

GEN_FEATURES = ("one", "calls", "decoded_rows", "prefill_tokens")
TRAIN_FEATURES = ("one", "cells", "rows")


def engine_work(
    prompt_tokens: Sequence[int] | np.ndarray,
    response_tokens: Sequence[int] | np.ndarray,
    capacity: int,
) -> tuple[int, int, int, int]:
    """``(prefill_calls, decode_iterations, decoded_rows, prefill_tokens)`` of one step's
    generation, replaying
    :meth:`real.engines.torch_engine.TorchEngine.generate` (continuous mode): requests in
    order; a loop iteration with waiting requests and free slots admits as many as fit
    (one prefill call, its prompts padded to the longest, each gets its first token),
    otherwise every running sequence decodes one token; a sequence finishes when it has
    its response length. Lengths are (n,) ints >= 1, ``capacity`` >= 1.

    Raises ValueError on a response length < 1 or a capacity < 1."""
    prompts = np.asarray(prompt_tokens, int)
    left = np.asarray(response_tokens, int)
    if capacity < 1:
        raise ValueError(f"engine_work: capacity must be >= 1, got {capacity}")
    if left.size and left.min() < 1:
        raise ValueError(f"engine_work: response lengths must be >= 1, got {left.min()}")
    prefills = decodes = decoded = prefill = 0
    nxt, running = 0, np.empty(0, int)  # tokens still to generate per running sequence
    while nxt < left.size or running.size:
        free = capacity - running.size
        if nxt < left.size and free > 0:
            k = min(free, left.size - nxt)
            prefill += k * int(prompts[nxt : nxt + k].max())
            running = np.concatenate([running, left[nxt : nxt + k] - 1])
            nxt += k
            prefills += 1
        else:
            decoded += running.size
            running = running - 1
            decodes += 1
        running = running[running > 0]
    return prefills, decodes, decoded, prefill


def step_features(
    prompt_tokens: np.ndarray, response_tokens: np.ndarray, kept: np.ndarray, capacity: int
) -> dict[str, float]:
    """Both phases' features of one step (module docstring) from its rollouts in request
    order: ``prompt_tokens``, ``response_tokens`` (n,) ints, ``kept`` (n,) bool (trained)."""
    prefills, decodes, decoded, prefill = engine_work(prompt_tokens, response_tokens, capacity)
    calls = prefills + decodes
    n = int(kept.sum())
    t = int((prompt_tokens + response_tokens)[kept].max()) if n else 0
    return {"one": 1.0, "calls": calls, "decoded_rows": decoded, "prefill_tokens": prefill,
            "cells": n * t, "rows": n}  # fmt: skip


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


def read_steps(run_dir: str | Path) -> RunSteps:
    """Read a ``real sync`` run (``config.json``, ``rollouts.parquet``, ``learner.jsonl``).

    Raises ValueError (``RunInputError`` or ``FileNotFoundError`` text) naming the file that
    is missing or lacks a field, or a step whose rollouts are not ``B x G``."""
    d = Path(run_dir)
    cfg_path = d / "config.json"
    if not cfg_path.exists():
        raise ValueError(f"{cfg_path}: missing (is this a `rolloutlab real sync` run?)")
    cfg = json.loads(cfg_path.read_text())["config"]
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
        feats.append(step_features(cols[0].ravel(), cols[1].ravel(), kept.ravel(), capacity))
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

    def step_s(self, features: pl.DataFrame) -> np.ndarray:
        """(n,) predicted CPU s of steps with ``features`` (one row each)."""
        g = sum(features[k].to_numpy() * v for k, v in self.gen.items())
        t = sum(features[k].to_numpy() * v for k, v in self.train.items())
        return np.asarray(g + t + self.sync_s, float)


def fit_law(runs: Sequence[RunSteps]) -> CostLaw:
    """Non-negative least squares per phase over every step of ``runs`` (module docstring).
    Raises ValueError when ``runs`` is empty."""
    if not runs:
        raise ValueError("fit_law: no fit runs")
    feats = pl.concat([r.features for r in runs])
    cpu = pl.concat([r.cpu for r in runs])

    def solve(names: tuple[str, ...], y: np.ndarray) -> dict[str, float]:
        X = feats.select(names).to_numpy().astype(float)
        scale = X.max(axis=0)  # columns of comparable size: nnls is then well conditioned
        coef, _ = nnls(X / scale, y)
        return {n: float(c / s) for n, c, s in zip(names, coef, scale, strict=True)}

    return CostLaw(solve(GEN_FEATURES, cpu["gen"].to_numpy()),
                   solve(TRAIN_FEATURES, cpu["train"].to_numpy()),
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
    """Mean predicted CPU s per step of a run at ``(G, B)`` over ``steps`` steps, its
    features drawn from ``runs``' groups at each step (module docstring), ``draws`` draws.

    Raises ValueError when no run has groups of ``G`` or more at some step."""
    rng = np.random.default_rng(seed)
    total, n = 0.0, 0
    for t in range(steps):
        pool = [g[:, :] for r in runs if r.G >= G and t < len(r.groups) for g in [r.groups[t]]]
        if not pool:
            raise ValueError(f"predict_setting: no fit run has groups of {G} or more at step {t}")
        rows = []
        for _ in range(draws):
            picks = []
            for _ in range(B):
                src = pool[rng.integers(len(pool))]
                grp = src[rng.integers(src.shape[0])]  # (G', 3)
                picks.append(grp[rng.choice(grp.shape[0], G, replace=False)])
            g = np.stack(picks)  # (B, G, 3)
            kept = kept_rollouts(g[..., 2], law.dynamic_sampling)
            rows.append(step_features(g[..., 0].ravel(), g[..., 1].ravel(), kept.ravel(), capacity))
        total += float(law.step_s(pl.DataFrame(rows)).sum())
        n += draws
    return total / n
