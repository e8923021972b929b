"""Per-step overhead of the vLLM engine against the torch engine, same task, one process.

A "step" is what a synchronous GRPO step asks of its engine: generate ``B x G`` rollouts
of the digit-chain task (B = 8 prompts from the task's sampler, G = 8 requests each with
their own seed, ``max_response_tokens`` 72, temperature 1) and then take the learner's
weights (``update_weights``; the vLLM engine also resets its prefix cache). Both engines
start from the same randomly initialised tiny policy, so almost every rollout runs to the
cap on either engine and the work per step is the same; the generated tokens are counted
and printed so that can be checked. Each engine is started and warmed up (two steps)
before ``--steps`` steps are timed; engine start is printed apart.

Last line ``vllm_over_torch_step=<ratio>``: median vLLM step time / median torch step time
(above 1: vLLM is slower on this model). vLLM is built for large models on accelerators;
on a 0.34 M-parameter model on 2 CPU cores its per-iteration scheduling and Python
overhead, not the model, decides the time, so the ratio measures that overhead.

Usage: python bench/vllm_overhead.py [--steps N] [--capacity N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from rolloutlab.real.config import SyncConfig
from rolloutlab.real.engine import RolloutRequest, TorchEngine
from rolloutlab.real.engines.vllm_engine import VllmEngine
from rolloutlab.real.model import build_model, load_config
from rolloutlab.real.run_checks import request_seed
from rolloutlab.real.sampling import SamplingParams

B, G = 8, 8


def step_requests(step: int, cfg: SyncConfig) -> list[RolloutRequest]:
    """The ``B x G`` requests of step ``step`` (the task's prompts, per-request seeds)."""
    rng = np.random.default_rng([cfg.seed, step, 7])
    problems = cfg.task_ops.sample(rng, B, frozenset())
    return [
        RolloutRequest(p * G + j, tuple(prob.prompt_ids), request_seed(cfg.seed, step, p, j, 0))
        for p, prob in enumerate(problems)
        for j in range(G)
    ]


def time_engine(make, steps: int, cfg: SyncConfig) -> dict[str, float]:
    """Start an engine with ``make()``, warm it up for two steps, then time ``steps`` steps
    of generate + update_weights. Returns start seconds, median/min step seconds and
    generated tokens per step (mean)."""
    params = SamplingParams(cfg.temperature, cfg.top_p, cfg.max_response_tokens)
    learner = build_model(load_config(), seed=1)
    t0 = time.perf_counter()
    engine = make()
    start_s = time.perf_counter() - t0
    times, tokens = [], []
    for step in range(steps + 2):
        reqs = step_requests(step, cfg)
        t = time.perf_counter()
        res = engine.generate(reqs, params)
        engine.update_weights(learner.state_dict(), step + 1)
        if step >= 2:
            times.append(time.perf_counter() - t)
            tokens.append(sum(len(r.response_ids) for r in res))
    if hasattr(engine, "close"):
        engine.close()
    return {
        "start_s": start_s,
        "step_s_median": statistics.median(times),
        "step_s_min": min(times),
        "tokens_per_step": float(np.mean(tokens)),
    }


def main() -> None:
    """Run both engines and print their numbers and the ratio."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--capacity", type=int, default=64)
    args = ap.parse_args()
    cfg = SyncConfig()
    clock0 = time.perf_counter()
    clock = lambda: time.perf_counter() - clock0
    policy = lambda: build_model(load_config(), seed=0)
    torch_r = time_engine(lambda: TorchEngine(policy(), args.capacity, clock), args.steps, cfg)
    vllm_r = time_engine(lambda: VllmEngine(policy(), args.capacity, clock), args.steps, cfg)
    print(f"task=digit-chain B={B} G={G} max_response_tokens={cfg.max_response_tokens} steps={args.steps}")
    for name, r in (("torch", torch_r), ("vllm", vllm_r)):
        print(
            f"{name}: start_s={r['start_s']:.1f} step_s_median={r['step_s_median']:.3f} "
            f"step_s_min={r['step_s_min']:.3f} tokens_per_step={r['tokens_per_step']:.0f}"
        )
    print(f"vllm_over_torch_step={vllm_r['step_s_median'] / torch_r['step_s_median']:.2f}")


if __name__ == "__main__":
    main()
