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
step ``t`` draw ``B`` groups of ``G`` rollouts from the fit runs' groups (a larger group
subsampled to ``G``: the same prompt's responses), compute their features, apply the
coefficients, and average over draws and steps. :func:`drawn_features` draws either as
plan 2 (``"groups"``: at step ``t`` only, with replacement, each fit run's batch alike, so
a small batch's groups repeat and a 256-rollout batch's longest sequence comes out short)
or as plan 3 (``"prompts"``: ``B`` distinct prompts from step ``t`` and its nearest steps,
their kept share from a logistic model in ``G``, ``B`` and the step, :func:`fit_kept_share`:
a larger batch learns sooner and keeps more mixed groups). **Modelling choice**: the
lengths of step ``t`` are pooled across settings, though a larger batch learns (and
shortens its walks) sooner.
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
from scipy.optimize import minimize, nnls

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
    seed: int = 0
    """The run's seed: with the step and the index in the batch, it names a prompt
    (``real sync`` samples step ``s``'s prompts from ``rng(seed, s)``, so a larger batch's
    first prompts are a smaller one's)."""

    def head(self, steps: int) -> RunSteps:
        """The run's first ``steps`` steps."""
        return RunSteps(self.name, self.G, self.B, self.capacity, self.groups[:steps],
                        self.features.head(steps), self.cpu.head(steps), self.seed)  # fmt: skip


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
    return RunSteps(d.name, int(groups[0].shape[1]), B, capacity, groups, pl.DataFrame(feats), cpu,
                    int(cfg.get("seed", 0)))  # fmt: skip


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


DRAWS = ("groups", "prompts")
"""How :func:`drawn_features` draws a batch: ``"groups"`` (plan 2, PLAN2.md) or
``"prompts"`` (plan 3, PLAN3.md)."""


def predict_setting(
    law: CostLaw,
    runs: Sequence[RunSteps],
    G: int,
    B: int,
    steps: int,
    capacity: int,
    draws: int = 50,
    seed: int = 0,
    draw: str = "groups",
) -> float:
    """Mean predicted CPU s per step of a run at ``(G, B)`` over ``steps`` steps: ``law``
    applied to :func:`drawn_features` (same arguments). Raises as it does."""
    feats = drawn_features(runs, G, B, steps, capacity, draws, seed, law.dynamic_sampling, draw)
    return float(law.step_s(feats).mean())


@dataclass(frozen=True)
class KeptShare:
    """The share of a step's groups that dynamic sampling keeps (mixed: rewards not all
    equal), ``sigmoid(a + b log2 G + c log2 B + d step)`` (:func:`fit_kept_share`); or a
    ``fixed`` share when the fit groups were all mixed or none was."""

    coef: tuple[float, float, float, float]
    """``(a, b, c, d)``: intercept, per doubling of ``G``, per doubling of ``B``, per step."""
    fixed: float | None = None

    def share(self, G: int, B: int, step: int) -> float:
        """The kept share (0-1) of a step ``step`` (0-based) batch of ``B`` groups of ``G``."""
        if self.fixed is not None:
            return self.fixed
        z = float(np.dot(self.coef, (1.0, np.log2(G), np.log2(B), step)))
        return float(1.0 / (1.0 + np.exp(-z)))


RIDGE = 1e-3
"""L2 penalty on :class:`KeptShare`'s slopes (not the intercept): fit runs of one ``G`` or
one ``B`` leave that slope unidentified; with thousands of groups it moves nothing else."""


def fit_kept_share(runs: Sequence[RunSteps]) -> KeptShare:
    """Logistic regression (maximum likelihood, ``scipy.optimize.minimize``, a :data:`RIDGE`
    penalty on the slopes) of each group's mixed flag on its run's ``log2 G``, ``log2 B``
    and step, over the distinct groups of ``runs`` at their own ``G`` (a group held by
    several runs of one ``(G, B)`` and seed, capacity variants or passes, counts once).
    Raises ValueError when ``runs`` hold no group."""
    seen: dict[tuple, tuple[float, float, float, bool]] = {}
    for r in runs:
        for t, batch in enumerate(r.groups):
            mixed = kept_rollouts(batch[..., 2], True)[:, 0]
            for i, g in enumerate(batch):
                key = (r.G, r.B, r.seed, t, i, g.tobytes())
                seen[key] = (np.log2(r.G), np.log2(r.B), float(t), bool(mixed[i]))
    if not seen:
        raise ValueError("fit_kept_share: the runs hold no group")
    rows = np.array(list(seen.values()), float)  # (n, 4)
    X = np.column_stack([np.ones(len(rows)), rows[:, :3]])
    y = rows[:, 3]
    if y.min() == y.max():
        return KeptShare((0.0, 0.0, 0.0, 0.0), fixed=float(y[0]))
    scale = np.maximum(np.abs(X).max(axis=0), 1.0)  # steps and log2 sizes alike
    Xs = X / scale
    slopes = np.array([0.0, 1.0, 1.0, 1.0])

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        z = Xs @ w
        p = 1.0 / (1.0 + np.exp(-z))
        nll = float(np.sum(np.logaddexp(0.0, z) - y * z)) + RIDGE * float(np.sum(slopes * w**2))
        return nll, Xs.T @ (p - y) + 2 * RIDGE * slopes * w

    w = minimize(loss, np.zeros(4), jac=True, method="BFGS").x / scale
    return KeptShare((float(w[0]), float(w[1]), float(w[2]), float(w[3])))


def drawn_features(
    runs: Sequence[RunSteps],
    G: int,
    B: int,
    steps: int,
    capacity: int,
    draws: int = 50,
    seed: int = 0,
    dynamic_sampling: bool = True,
    draw: str = "groups",
) -> pl.DataFrame:
    """``steps x draws`` rows of :func:`step_features` of a run at ``(G, B)`` and
    ``capacity``, each from a batch of ``B`` groups of ``G`` drawn from ``runs``' groups
    (a larger group subsampled to ``G``: the same prompt's responses) as ``draw`` says
    (:data:`DRAWS`):

    - ``"groups"`` (PLAN2.md): at step ``t``, ``B`` times, a run's step-``t`` batch
      uniformly, then one of its groups (with replacement). A step batch that several runs
      hold (one setting at two capacities, or two passes of it: the same seeds draw the
      same rollouts) counts once.
    - ``"prompts"`` (PLAN3.md; :func:`prompt_batch`): ``B`` distinct prompts from step
      ``t`` and its nearest steps, as many kept (mixed) as :func:`fit_kept_share`'s model
      of ``runs`` says on average.

    Raises ValueError when no run has groups of ``G`` or more at some step, or on another
    ``draw``."""
    if draw not in DRAWS:
        raise ValueError(f"drawn_features: draw must be one of {DRAWS}, got {draw!r}")
    rng = np.random.default_rng(seed)
    for t in range(steps):
        if not any(r.G >= G and t < len(r.groups) for r in runs):
            raise ValueError(f"predict_setting: no fit run has groups of {G} or more at step {t}")
    share = fit_kept_share(runs) if draw == "prompts" and dynamic_sampling else None
    prompts = prompt_pool(runs, G) if draw == "prompts" else []
    rows = []
    for t in range(steps):
        batches = [r.groups[t] for r in runs if r.G >= G and t < len(r.groups)]
        pool = list({(g.shape, g.tobytes()): g for g in batches}.values())
        for _ in range(draws):
            if draw == "prompts":
                kept_groups = B if share is None else int(rng.binomial(B, share.share(G, B, t)))
                g = prompt_batch(prompts, G, B, t, kept_groups, dynamic_sampling, rng)
            else:
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


def prompt_pool(runs: Sequence[RunSteps], G: int) -> list[dict[tuple[int, int], list[np.ndarray]]]:
    """Per step ``s`` that some run of ``G' >= G`` holds: ``{(seed, index): groups}``, the
    distinct ``(G', 3)`` groups those runs drew for that prompt (:attr:`RunSteps.seed`)."""
    steps = max((len(r.groups) for r in runs if r.G >= G), default=0)
    pool: list[dict[tuple[int, int], dict[bytes, np.ndarray]]] = [{} for _ in range(steps)]
    for r in runs:
        if r.G < G:
            continue
        for s, batch in enumerate(r.groups):
            for i, g in enumerate(batch):
                pool[s].setdefault((r.seed, i), {})[g.tobytes() + bytes(str(g.shape), "ascii")] = g
    return [{k: list(v.values()) for k, v in step.items()} for step in pool]


def prompt_batch(
    pool: Sequence[dict[tuple[int, int], list[np.ndarray]]],
    G: int,
    B: int,
    step: int,
    kept_groups: int,
    dynamic_sampling: bool,
    rng: np.random.Generator,
) -> np.ndarray:
    """One drawn ``(B, G, 3)`` batch of distinct prompts (PLAN3.md): steps of ``pool``
    (:func:`prompt_pool`) in order of distance from ``step`` (a tie: the earlier), each
    prompt one of its groups uniformly, subsampled to ``G`` without replacement, until
    ``kept_groups`` prompts with a mixed group (with ``dynamic_sampling``; without it
    every group counts as kept) and ``B - kept_groups`` without are held; then that many
    of each, without replacement, in a random order. Fewer held than asked after every
    step: all of that stratum, the other filling the rest; fewer than ``B`` prompts in
    all: the rest drawn again (with replacement) from those held.

    Raises ValueError when ``pool`` holds no prompt."""
    order = sorted(range(len(pool)), key=lambda s: (abs(s - step), s))
    strata: tuple[list[np.ndarray], list[np.ndarray]] = ([], [])  # kept, not kept
    for s in order:
        for groups in pool[s].values():
            g = groups[rng.integers(len(groups))]
            g = g[rng.choice(g.shape[0], G, replace=False)]
            mixed = not dynamic_sampling or bool(kept_rollouts(g[None, :, 2], True)[0, 0])
            strata[0 if mixed else 1].append(g)
        if len(strata[0]) >= kept_groups and len(strata[1]) >= B - kept_groups:
            break
    held = strata[0] + strata[1]
    if not held:
        raise ValueError("prompt_batch: the pool holds no prompt")
    take_kept = min(kept_groups, len(strata[0]))
    take_rest = min(B - take_kept, len(strata[1]))
    take_kept = min(B - take_rest, len(strata[0]))
    picks = [strata[0][i] for i in rng.choice(len(strata[0]), take_kept, replace=False)]
    picks += [strata[1][i] for i in rng.choice(len(strata[1]), take_rest, replace=False)]
    picks += [held[i] for i in rng.integers(len(held), size=B - len(picks))]
    return np.stack([picks[i] for i in rng.permutation(B)])


def step_clock_law(
    law: CostLaw,
    runs: Sequence[RunSteps],
    G: np.ndarray,
    B: np.ndarray,
    capacity: int,
    draws: int = 20,
    seed: int = 0,
    draw: str = "groups",
) -> np.ndarray:
    """Predicted ``t_end`` (T,) in CPU s of a run whose steps have group size ``G`` and
    prompts ``B`` ((T,) ints) on ``capacity`` engine slots: the cumulative sum of each
    step's setting's mean predicted cost (:func:`predict_setting` over the steps every run
    of ``runs`` has, ``draws`` draws as ``draw`` says, one ``seed`` for every setting). Raises as
    :func:`predict_setting` does (no run of ``runs`` has groups of some ``G``)."""
    steps = min(len(r.groups) for r in runs)
    cost: dict[tuple[int, int], float] = {}
    for g, b in {(int(g), int(b)) for g, b in zip(G, B, strict=True)}:
        cost[(g, b)] = predict_setting(law, runs, g, b, steps, capacity, draws, seed, draw)
    return np.cumsum([cost[(int(g), int(b))] for g, b in zip(G, B, strict=True)])
