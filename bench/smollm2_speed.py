"""SmolLM2-135M-Instruct on the CPU: generation speed of the vLLM and torch engines in float32
and bfloat16, and one synchronous GRPO step's breakdown, measured in one run.

Generation: the same ``B x G`` requests of the arithmetic task (held-out prompts through the
chat template, per-request seeds, temperature 1, ``--max-tokens`` cap) on each engine and
dtype, after one warm-up batch; tokens/s = generated tokens / wall seconds of the
``generate`` call, and / process CPU seconds (in-process vLLM: the engine core runs in
this process too), because the wall clock of the shared 2-core machine moves with other
jobs. The engines run one after the other; ``uptime``'s 1-minute load average is printed
before and after each figure: compare figures only at similar load.

GRPO step (:func:`grpo_step`): generation, the learner's update and the weight sync of one
synchronous step on the vLLM engine, timed phase by phase, the update once per
``--trainable-layers`` value (default: the last 4 layers, then the whole model), with
``training/rollout_probs_diff_*``; the update always runs (a run's dynamic sampling would
skip a step whose groups all got one reward).

Ratios printed last: vLLM over torch tokens/s per dtype, bfloat16 over float32 per engine,
and the step shares. Writes ``--out`` (JSON) with every figure and its load.

Usage: python bench/smollm2_speed.py [--prompts 4] [--group 4] [--max-tokens 128]
       [--trainable-layers 4,0] [--out results/smollm2_speed.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

import torch
from rolloutlab.real.engines.interface import RolloutRequest
from rolloutlab.real.engines.sampling import SamplingParams
from rolloutlab.real.engines.torch_engine import TorchEngine
from rolloutlab.real.engines.vllm_engine import VllmConfig, VllmEngine
from rolloutlab.real.policy import smollm2
from rolloutlab.real.rundir.config import LearnerConfig, SyncConfig


def load1() -> float:
    """The 1-minute load average (``uptime``'s first figure)."""
    return round(os.getloadavg()[0], 2)


def requests(cfg: SyncConfig, B: int, G: int, offset: int = 0) -> list[RolloutRequest]:
    """``B x G`` requests on held-out prompts ``offset..offset+B-1``."""
    problems = cfg.task_ops.heldout(offset + B)[offset:]
    return [
        RolloutRequest(p * G + j, tuple(prob.prompt_ids), seed=1000 + p * G + j)
        for p, prob in enumerate(problems)
        for j in range(G)
    ]


def timed_generate(engine, reqs, params) -> dict:
    """One ``generate`` call: tokens, wall and CPU seconds, tokens/s, load before/after."""
    before = load1()
    w0, c0 = time.perf_counter(), time.process_time()
    res = engine.generate(reqs, params)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    tokens = sum(len(r.response_ids) for r in res)
    lengths = sorted(len(r.response_ids) for r in res)
    return {
        "tokens": tokens,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "tokens_per_s": round(tokens / wall, 1),
        "tokens_per_cpu_s": round(tokens / cpu, 1),
        "length_median": lengths[len(lengths) // 2],
        "length_max": lengths[-1],
        "load_before": before,
        "load_after": load1(),
    }


def engine_speed(engine_name: str, dtype: str, policy, cfg, B, G, params) -> dict:
    """Start one engine in ``dtype``, warm it up, time one batch."""
    t0 = time.perf_counter()
    clock = lambda: time.perf_counter() - t0
    if engine_name == "vllm":
        engine = VllmEngine(policy, B * G, clock, VllmConfig(dtype=dtype))
    else:
        model = policy.to(getattr(torch, dtype))
        engine = TorchEngine(model, B * G, clock)
    start_s = time.perf_counter() - t0
    try:
        engine.generate(
            requests(cfg, 2, 1, offset=B), dataclasses.replace(params, max_response_length=8)
        )
        out = timed_generate(engine, requests(cfg, B, G), params)
    finally:
        if hasattr(engine, "close"):
            engine.close()
    out.update(engine=engine_name, dtype=dtype, start_s=round(start_s, 1))
    print(json.dumps(out), flush=True)
    return out


def grpo_step(args, cfg: SyncConfig, params: SamplingParams) -> list[dict]:
    """One synchronous GRPO step on the vLLM engine (float32, the learner's dtype), phase by
    phase with the run loop's own pieces: generate ``B x G`` rollouts, score them, the
    learner's update (:class:`real.policy.learner.Learner`, KL to the reference tracked as
    in a run) for each ``--trainable-layers`` value on copies of the same policy, and the
    weight sync of the updated policy into the engine. Seconds and shares of the step."""
    import copy

    from rolloutlab.real.policy.grpo import group_advantages
    from rolloutlab.real.policy.learner import Learner, pack

    B, G = args.prompts, args.group
    ops = cfg.task_ops
    problems = ops.heldout(B)
    reference = smollm2.load_policy()
    t0 = time.perf_counter()
    engine = VllmEngine(copy.deepcopy(reference), B * G, lambda: time.perf_counter() - t0)
    rows = []
    try:
        engine.generate(
            requests(cfg, 2, 1, offset=B), dataclasses.replace(params, max_response_length=8)
        )
        reqs = requests(cfg, B, G)
        gen = timed_generate(engine, reqs, params)
        res = engine.generate(reqs, params)  # the same seeds: the same rollouts, for the learner
        rewards = torch.tensor(
            [
                [ops.reward(problems[p], res[p * G + j].response_ids) for j in range(G)]
                for p in range(B)
            ]
        )
        batch = pack(
            [r.prompt_ids for r in reqs],
            [r.response_ids for r in res],
            [r.logprobs for r in res],
            group_advantages(rewards).reshape(-1),
        )
        for k in [int(x) for x in args.trainable_layers.split(",")]:
            policy = copy.deepcopy(reference)
            learner = Learner(policy, reference, LearnerConfig(lr=1e-5, trainable_layers=k))
            before = load1()
            w0, c0 = time.perf_counter(), time.process_time()
            stats = learner.update(batch, torch.Generator().manual_seed(0))
            train_s, train_cpu = time.perf_counter() - w0, time.process_time() - c0
            w0, c0 = time.perf_counter(), time.process_time()
            engine.update_weights(policy.state_dict(), 1)
            sync_s, sync_cpu = time.perf_counter() - w0, time.process_time() - c0
            total = gen["wall_s"] + train_s + sync_s
            row = {
                "trainable_layers": k,
                "rollouts": B * G,
                "response_tokens": gen["tokens"],
                "reward_mean": round(float(rewards.mean()), 3),
                "gen_s": gen["wall_s"],
                "train_s": round(train_s, 2),
                "sync_s": round(sync_s, 2),
                "gen_share": round(gen["wall_s"] / total, 3),
                "train_share": round(train_s / total, 3),
                "sync_share": round(sync_s / total, 3),
                "cpu_gen_s": gen["cpu_s"],
                "cpu_train_s": round(train_cpu, 2),
                "cpu_sync_s": round(sync_cpu, 2),
                "rollout_probs_diff_mean": stats.probs_diff_mean,
                "rollout_probs_diff_max": stats.probs_diff_max,
                "load_gen": [gen["load_before"], gen["load_after"]],
                "load_train_sync": [before, load1()],
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        engine.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=4, help="prompt batch B")
    ap.add_argument("--group", type=int, default=4, help="group size G")
    ap.add_argument("--max-tokens", type=int, default=128, help="response cap (tokens)")
    ap.add_argument(
        "--trainable-layers",
        default="4,0",
        help="learner: last k layers, one update per value (0 = all; '' = no GRPO step)",
    )
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    ap.add_argument("--engines", default="vllm,torch", help="engines to time ('' = none)")
    ap.add_argument("--dtypes", default="float32,bfloat16", help="dtypes to time")
    ap.add_argument("--out", type=Path, default=None, help="JSON of every figure")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = SyncConfig(model=smollm2.MODEL_NAME, task_name="arithmetic")
    t0 = time.perf_counter()
    folder = smollm2.ensure_model()
    prep_s = time.perf_counter() - t0  # conversion if the cache was empty, else the hash check
    params = SamplingParams(temperature=1.0, max_response_length=args.max_tokens)
    speeds = []
    for engine_name in filter(None, args.engines.split(",")):
        for dtype in filter(None, args.dtypes.split(",")):
            policy = smollm2.load_policy()
            speeds.append(
                engine_speed(engine_name, dtype, policy, cfg, args.prompts, args.group, params)
            )
    steps = grpo_step(args, cfg, params) if args.trainable_layers else []
    by = {(s["engine"], s["dtype"]): s["tokens_per_s"] for s in speeds}
    ratios = {}
    for dtype in args.dtypes.split(","):
        if ("vllm", dtype) in by and ("torch", dtype) in by:
            ratios[f"vllm_over_torch_{dtype}"] = round(by["vllm", dtype] / by["torch", dtype], 2)
    for engine_name in args.engines.split(","):
        if (engine_name, "float32") in by and (engine_name, "bfloat16") in by:
            ratios[f"{engine_name}_bf16_over_fp32"] = round(
                by[engine_name, "bfloat16"] / by[engine_name, "float32"], 2
            )
    doc = {
        "model": str(folder),
        "ensure_model_s": round(prep_s, 1),
        "settings": vars(args) | {"out": str(args.out)},
        "cpu_count": os.cpu_count(),
        "generation": speeds,
        "grpo_steps": steps,
        "ratios": ratios,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(" ".join(f"{k}={v}" for k, v in ratios.items()))


if __name__ == "__main__":
    main()
