"""The simulator beside the naive rules on every published step-time curve across GPU
counts (``calibration/data/gpu_scaling.csv``), each calibrated on every point in turn.

Every rule sees only the calibration point's published step time:

- ``simulator``: one SimPy run per point, scaled by one factor so the calibration point
  matches (``bench/areal_scaling_validation.py``'s :func:`errors`); verl's points are
  :func:`verl_async_validation.simulate` at ``staleness_threshold`` 0.5 (the same
  placement, pipeline and learner as that bench, uncalibrated), verl's colocated runs
  :func:`verl_colocated`, AReaL's :func:`areal_scaling_validation.simulate` (its length
  model; v0.1's points with :data:`AREAL_SETUPS`), NeMo-RL's Qwen3-235B-A22B runs
  :func:`nemo_rl_colocated` (a mixture of experts, :data:`NEMO_RL`);
- ``constant`` and ``tokens_per_gpu``: :mod:`calibration.validation.gpu_scaling`; on a
  curve of three or more points also the straight line in N through the other points
  (:func:`calibration.validation.gpu_scaling.line_errors`), which sees two points.

A curve passes when every held-out point is within 20 % whichever point calibrates and
the worst error is below tokens per GPU's (docs/pipelines.md, "Step time across GPU
counts").

Usage: python bench/gpu_scaling_validation.py [--seeds 0] [--versions 5] [--steps 6]
    [--verl-setup bench|scripts] [--verl-threshold 0.5] [--rules-only] [--data CSV]
    [--out runs/gpu_scaling]

``--rules-only`` prints the naive rules' rows alone (no simulation, under a second).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

import areal_scaling_validation as areal
import numpy as np
import verl_async_validation as verl
from rolloutlab.calibration.validation.gpu_scaling import (
    RULES,
    Point,
    ScalingDataError,
    line_errors,
    load,
    rule_errors,
    worst,
)
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.models.dp_imbalance import Imbalance
from rolloutlab.sim.models.hardware import get_gpu, get_model
from rolloutlab.sim.models.learner_cost import Layout
from rolloutlab.sim.models.lengths import LognormalLengths
from rolloutlab.sim.pipelines.registry import simulate as run_pipeline
from rolloutlab.sim.pipelines.spec import parse_pipeline
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.overrides import apply_overrides
from rolloutlab.sim.scenario.placement import apply_split, parse_split
from rolloutlab.sim.scenario.scenario import load_scenario
from scipy.optimize import brentq
from scipy.stats import norm

AREAL_MODELS = {"1.5B": "r1-distill-qwen-1.5b", "7B": "qwen2.5-7b"}
"""AReaL curve -> the simulator's model (as ``bench/areal_scaling_validation.py``)."""

AREAL_SETUPS: dict[tuple[str, str], dict[str, int]] = {
    ("areal-v0.2", "1.5B"): {},
    ("areal-v0.2", "7B"): {},
    ("areal-v0.1", "1.5B"): {"prompts": 1024, "group": 8, "updates": 1, "tp": 1, "cap": 16384},
    ("areal-v0.1", "7B"): {"prompts": 1024, "group": 16, "updates": 4, "tp": 4, "cap": 16384},
}
"""(source, curve) -> keyword arguments of :func:`areal_scaling_validation.simulate`
besides model, GPUs, steps and seed (empty: its defaults, AReaL v0.2's configs). AReaL
v0.1: ``examples/train_batch_{1.5B,7B}_n{4,16}.sh`` at inclusionAI/AReaL 2963a6731
(prompts x group size, ``ppo_n_minibatches``, ``vllm.d{R}p1m{tp}`` rollout replicas on
half the GPUs, ``max_new_tokens`` 16384)."""

COLOCATED = {"prompts": 512, "mini": 32, "fsdp_size": 2}
"""verl's colocated runs (``recipe/fully_async_policy/exp/qwen2-7B-math_{32,64,128}/
fsdp2_colocate/run.sh`` at verl 9280c114): ``train_prompt_bsz``, ``train_prompt_mini_bsz``
and ``fsdp_size``; n = 16, rollout TP 4, Ulysses SP 4 and the 61,440-token micro-batch
budget are :mod:`verl_async_validation`'s."""
VERL_THRESHOLD = 0.5
"""verl's GPU curve runs at ``staleness_threshold`` 0.5 (README table; ``--verl-threshold``)."""

VERL_SETUP = "bench"
"""How the verl points are set up (``--verl-setup``): ``bench``, every point as
``bench/verl_async_validation.py`` runs it (4 syncs of 4 x 128 prompts, ``fsdp_size`` 8);
``scripts``, each point as its own run script sets it (:data:`VERL_SCRIPTS`)."""

VERL_SCRIPTS = {16: 16, 32: 8, 64: 4}
"""trainer GPUs -> ``trigger_parameter_sync_step`` of the run scripts behind the GPU curve
(``recipe/fully_async_policy/exp/qwen2-7B-math_{32,64,128}/fsdp2_fully-async_{16-16,
32-32,64-64}/run.sh``, verl commits 1fc52bb5 and 9280c114; experiment names
``..._mbs32_tpf{16,8,4}_fixmcs``): ``fsdp_size`` 2, ``total_rollout_steps = 512 x 400``,
no ``require_batches`` (added to verl on 2025-10-11). The trainer of that commit takes
``required_samples = minimal_bsz x ppo_mini_batch_size / n`` prompts a local update, with
``minimal_bsz`` the trainer GPUs (``verl/trainer/ppo/ray_trainer.py``), so
:data:`SCRIPT_PROMPTS_PER_GPU` x trainer GPUs = 32, 64, 128 prompts, and a weight version
is 512 prompts at every point. The README states ``require_batches`` 4 and
``trigger_parameter_sync_step`` 4 for every row instead (the ``bench`` set-up, identical
at 64:64 but for ``fsdp_size``); docs/pipelines.md weighs the two."""

STEP_PROMPTS, SCRIPT_MINI, SCRIPT_PROMPTS_PER_GPU = 512, 32, 2
"""Prompts of a published verl step; ``ppo_mini_batch_size`` of the run scripts; prompts
per trainer GPU of a local update (``ppo_mini_batch_size / n`` = 32 / 16)."""


def verl_scripted(trainer_gpus: int, seed: int, versions: int) -> float:
    """Simulated seconds per published step (512 prompts) of the verl point on
    ``trainer_gpus`` as its run script ran it: ``verl_async_validation.simulate`` with
    K = :data:`VERL_SCRIPTS` local updates of 2 prompts per trainer GPU per version
    (mini-batches of 32) and ``fsdp_size`` 2, the time per version times 512 / (prompts
    a version). ``versions`` is scaled up so every run holds at least 16 local updates
    after the first version. Raises KeyError off the curve."""
    k = VERL_SCRIPTS[trainer_gpus]
    b = SCRIPT_PROMPTS_PER_GPU * trainer_gpus
    saved = verl.K, verl.B, verl.MINI, verl.RECIPE_BATCHING
    try:
        verl.K, verl.B, verl.MINI = k, b, SCRIPT_MINI
        verl.RECIPE_BATCHING = dataclasses.replace(verl.RECIPE_BATCHING, shard_gpus=2)
        per_version, _ = verl.simulate(
            trainer_gpus, VERL_THRESHOLD, max(versions, 1 + 16 // k), seed
        )
    finally:
        verl.K, verl.B, verl.MINI, verl.RECIPE_BATCHING = saved
    return per_version * STEP_PROMPTS / (b * k)


def verl_colocated(gpus: int, steps: int, seed: int) -> float:
    """Simulated steady-state seconds per step of verl's synchronous colocated run on
    ``gpus`` H20 (every GPU generates in TP-4 replicas and trains): B = 512 prompts x
    G = 16, learner ``old_log_prob`` + ``update_actor`` at 16 optimizer updates, token-budget
    micro-batches over ``fsdp_size`` 2 and verl's data-parallel flow
    (:class:`Imbalance` ``verl`` over 16 mini-batches); the mean of steps 2..``steps``.
    Parameter and optimizer offload (set by the runs) are not modelled.

    Raises ValueError as :func:`apply_split` (``gpus`` not a multiple of the TP)."""
    b, g = COLOCATED["prompts"], verl.G
    sc = apply_overrides(
        load_scenario("longcot"), model="qwen2.5-7b", gpu="h20", tp=verl.TP, kv_cache=False
    )
    rng = np.random.default_rng(seed)
    tokens = float(sc.lengths.sample(rng, b, g, 0).sum() + b * g * sc.prompt_tokens)
    sc = apply_split(
        sc,
        parse_split(gpus, None, verl.TP, colocated=True),
        get_model("qwen2.5-7b"),
        get_gpu("h20"),
        phases=("timing_s/old_log_prob", "timing_s/update_actor"),
        updates=b // COLOCATED["mini"],
        imbalance=Imbalance(b * g, g, "verl", verl.SP, mini_batches=b // COLOCATED["mini"]),
        batching=dataclasses.replace(verl.RECIPE_BATCHING, shard_gpus=COLOCATED["fsdp_size"]),
        tokens_at=tokens,
    )
    cfg = RunConfig(steps=steps, prompts=b, seed=seed)
    pipe = parse_pipeline("sync", "colocated")
    ends = run_pipeline(sc, StaticG(g), cfg, pipe).steps.sort("step")["t_end"].to_list()
    return (ends[-1] - ends[0]) / (steps - 1)


NEMO_RL = {
    "prompts": 16,
    "group": 32,
    "rollout_tp": 16,
    "util": 0.6,
    "tp": 2,
    "cp": 2,
    "pp": 8,
    "ep": 16,
    "mb_tokens": 8192,
    "max_total": 8192,
}
"""NeMo-RL v0.6's Qwen3-235B-A22B on-policy runs (``examples/configs/recipes/llm/
performance/grpo-qwen3-235b-{16,32}n8g.yaml`` over ``examples/configs/grpo_math_1B.yaml``
at NVIDIA-NeMo/RL v0.6.0): ``num_prompts_per_step`` x ``num_generations_per_prompt``,
vLLM ``tensor_parallel_size`` and ``gpu_memory_utilization``, Megatron TP, CP, PP, EP,
``train_mb_tokens`` (8,192 x ``train_micro_batch_size`` 1) and
``max_total_sequence_length`` (prompt + response)."""

NEMO_PROMPT, NEMO_MEAN_RESPONSE = 120, 5706.0
"""Prompt tokens (the table's tokens per second per GPU x step x GPUs / 512 less its
average length: 119 and 121) and mean response tokens (the table's 5,698 and 5,713,
averaged): docs/pipelines.md, "NeMo-RL's Qwen3-235B-A22B curve: plan"."""


def nemo_rl_lengths() -> LognormalLengths:
    """Response lengths of the NeMo-RL curve: a capped lognormal with the AReaL bench's
    log-spread and between-prompt share (:func:`areal_scaling_validation.areal_lengths`),
    cap ``max_total - prompt`` tokens and ``mu`` solved so that the capped mean is
    :data:`NEMO_MEAN_RESPONSE` (``E[min(X, c)] = exp(mu + s^2/2) Phi((ln c - mu - s^2) / s)
    + c (1 - Phi((ln c - mu) / s))``, the lognormal's partial expectation)."""
    ref = areal.areal_lengths()
    s = float(np.hypot(ref.sigma_prompt, ref.sigma_within))
    cap = NEMO_RL["max_total"] - NEMO_PROMPT
    lc = np.log(cap)

    def gap(mu: float) -> float:
        body = np.exp(mu + s * s / 2) * norm.cdf((lc - mu - s * s) / s)
        return float(body + cap * norm.sf((lc - mu) / s) - NEMO_MEAN_RESPONSE)

    mu = brentq(gap, 0.0, 2 * lc)
    share = ref.sigma_prompt**2 / s**2
    return LognormalLengths(mu, s * np.sqrt(share), s * np.sqrt(1 - share), cap)


def nemo_rl_colocated(gpus: int, steps: int, seed: int) -> float:
    """Simulated steady-state seconds per step of NeMo-RL's synchronous colocated
    Qwen3-235B-A22B run on ``gpus`` H100 (:data:`NEMO_RL`): ``gpus / 16`` vLLM replicas
    of TP 16 at ``gpu_memory_utilization`` 0.6 with the expert read linearised at their
    starting sequences, 16 prompts x G = 32 of :func:`nemo_rl_lengths`, learner
    ``old_log_prob`` + ``ref`` + ``update_actor`` at one optimizer update on Megatron's
    ``Layout(gpus, tp 2, pp 8, ep 16)`` with CP 2 folded into data parallelism and one
    micro-batch per 8,192 packed tokens per data-parallel x CP group (the pipeline
    bubble); the mean of steps 2..``steps``. The expert all-to-all, recomputation and CP's
    exchange are not modelled (docs/pipelines.md, the plan).

    Raises ValueError as :func:`apply_split` (``gpus`` not a multiple of 128)."""
    r = NEMO_RL
    b, g, model = r["prompts"], r["group"], "qwen3-235b-a22b"
    replicas = gpus // r["rollout_tp"]
    sc = load_scenario("longcot")
    sc = dataclasses.replace(
        sc,
        lengths=nemo_rl_lengths(),
        prompt_tokens=NEMO_PROMPT,
        engine=dataclasses.replace(sc.engine, gpu_memory_utilization=r["util"]),
    )
    sc = apply_overrides(
        sc, model=model, gpu="h100", tp=r["rollout_tp"], decode_batch=b * g // max(replicas, 1)
    )
    rng = np.random.default_rng(seed)
    tokens = float(sc.lengths.sample(rng, b, g, 0).sum() + b * g * sc.prompt_tokens)
    groups = gpus // (
        r["tp"] * r["cp"] * r["pp"]
    )  # data-parallel x CP groups of 2 sequences' halves
    micro = max(1, math.ceil(tokens / (groups * r["mb_tokens"])))
    lay = Layout(gpus, tp=r["tp"], pp=r["pp"], fsdp=False, micro_batches=micro, ep=r["ep"])
    sc = apply_split(
        sc,
        parse_split(gpus, None, r["rollout_tp"], colocated=True),
        get_model(model),
        get_gpu("h100"),
        phases=("timing_s/old_log_prob", "timing_s/ref", "timing_s/update_actor"),
        updates=1,
        tokens_at=tokens,
        layout=lay,
    )
    cfg = RunConfig(steps=steps, prompts=b, seed=seed)
    pipe = parse_pipeline("sync", "colocated")
    ends = run_pipeline(sc, StaticG(g), cfg, pipe).steps.sort("step")["t_end"].to_list()
    return (ends[-1] - ends[0]) / (steps - 1)


def simulated(source: str, curve: str, p: Point, seed: int, versions: int, steps: int) -> float:
    """Simulated steady-state seconds per step of point ``p``. Raises KeyError on a source
    or curve this bench cannot simulate."""
    if source == "verl-fully-async" and VERL_SETUP == "scripts":
        return verl_scripted(p.trainer_gpus, seed, versions)
    if source == "verl-fully-async":
        return verl.simulate(p.trainer_gpus, VERL_THRESHOLD, versions, seed)[0]
    if source == "verl-colocate-sync":
        return verl_colocated(p.gpus, steps, seed)
    if (source, curve) == ("nemo-rl-v0.6", "qwen3-235b-h100"):
        return nemo_rl_colocated(p.gpus, steps, seed)
    if (source, curve) in AREAL_SETUPS:
        kw = AREAL_SETUPS[(source, curve)]
        return areal.simulate(AREAL_MODELS[curve], p.gpus, steps, seed, **kw)
    raise KeyError(f"no simulator set-up for source {source!r}, curve {curve!r}")


def rows(
    curves: dict[tuple[str, str], list[Point]],
    seeds: list[int],
    versions: int,
    steps: int,
    simulate: bool = True,
):
    """Markdown rows: per curve, rule and calibration point, the errors (%) at every point
    and the rule's worst held-out error over the curve; a last column says pass/fail.
    ``simulate=False``: the naive rules' rows only."""
    cache: dict[tuple[str, str, int], float] = {}
    for (source, curve), pts in curves.items():
        table = {}
        if simulate:
            sims = []
            for p in pts:
                key = (source, curve if source.startswith("areal") else "", p.gpus)
                if key not in cache:
                    runs = [simulated(source, curve, p, s, versions, steps) for s in seeds]
                    cache[key] = sum(runs) / len(runs)
                sims.append(cache[key])
            pubs = [p.step_s for p in pts]
            table["simulator"] = [areal.errors(sims, pubs, c) for c in range(len(pts))]
        table |= {r: rule_errors(pts, r) for r in RULES}
        bar = worst(table["tokens_per_gpu"])
        for rule, errs in table.items():
            w = worst(errs)
            for c, cal in enumerate(pts):
                each = " / ".join(
                    f"{p.trainer_gpus}: {'cal.' if i == c else f'{100 * errs[c][i]:+.1f}'}"
                    for i, p in enumerate(pts)
                )
                ok = w <= 0.20 and (rule == "tokens_per_gpu" or w < bar)
                verdict = ("pass" if ok else "fail") if c == 0 else ""
                yield (
                    f"| {source} | {curve} | {rule} | {cal.trainer_gpus} | {each} "
                    f"| {100 * w:.1f} % {verdict} |"
                )
        line = line_errors(pts)
        if line is not None:
            each = " / ".join(f"{p.trainer_gpus}: {100 * e:+.1f}" for p, e in zip(pts, line))
            w = max(abs(e) for e in line)
            yield f"| {source} | {curve} | line (other points) | each held out | {each} | {100 * w:.1f} % |"


def main() -> None:
    global VERL_SETUP, VERL_THRESHOLD
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None, help="table (default: the bundled one)")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds (mean over them)")
    ap.add_argument("--versions", type=int, default=5, help="verl weight versions per run")
    ap.add_argument("--steps", type=int, default=6, help="AReaL steps per run")
    ap.add_argument("--verl-setup", choices=("bench", "scripts"), default=VERL_SETUP)
    ap.add_argument("--verl-threshold", type=float, default=VERL_THRESHOLD)
    ap.add_argument(
        "--rules-only", action="store_true", help="the naive rules' rows only, no simulation"
    )
    ap.add_argument("--out", default="runs/gpu_scaling", help="folder of table.md")
    args = ap.parse_args()
    VERL_SETUP, VERL_THRESHOLD = args.verl_setup, args.verl_threshold
    if args.versions < 2 or args.steps < 2:
        ap.error("--versions and --steps: need >= 2 (the first is warm-up)")
    try:
        seeds = [int(x) for x in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds: need comma-separated integers, got {args.seeds!r}")
    try:
        curves = load(args.data)
    except ScalingDataError as e:
        raise SystemExit(str(e)) from None
    lines = [
        "| source | curve | rule | calibrated on N | error % at trainer GPUs N = ... "
        "| worst held-out (pass: <= 20 % and below tokens per GPU) |",
        "|---|---|---|---|---|---|",
        *rows(curves, seeds, args.versions, args.steps, simulate=not args.rules_only),
    ]
    out = Path(args.out) / "table.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text(), end="")


if __name__ == "__main__":
    main()
