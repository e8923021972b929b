"""Per-step overhead of the vLLM engine against the torch engine, same task, one process.

A "step" is what a synchronous GRPO step asks of its engine: generate ``B x G`` rollouts
of the digit-chain task (B = 8 prompts from the task's sampler, G = 8 requests each with
their own seed, ``max_response_length`` 72, temperature 1) and then take the learner's
weights (``update_weights``; the vLLM engine also resets its prefix cache). Both engines
start from the same randomly initialised tiny policy, so almost every rollout runs to the
cap on either engine and the work per step is the same; the generated tokens are counted
and printed so that can be checked. Each engine is started and warmed up (two steps)
before ``--steps`` steps are timed; engine start is printed apart.

The engines run interleaved, step by step, so the machine's load falls on both alike.
Last line ``vllm_over_torch_step=<ratio>``: median vLLM step **CPU time** (this process:
the in-process engine core included) / median torch step CPU time (above 1: vLLM is
slower on this model); CPU time, because wall time on the shared 2-core machine swings by
10x with other jobs. The wall-time ratio and the per-step paired wall ratios are printed too. vLLM is built for large models on accelerators;
on a 0.34 M-parameter model on 2 CPU cores its per-iteration scheduling and Python
overhead, not the model, decides the time, so the ratio measures that overhead.

Usage: python bench/vllm_overhead.py [--steps N] [--max-num-seqs N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from rolloutlab.real.engines.interface import RolloutRequest
from rolloutlab.real.engines.sampling import SamplingParams
from rolloutlab.real.engines.torch_engine import TorchEngine
from rolloutlab.real.engines.vllm_engine import VllmEngine
from rolloutlab.real.policy.model import build_model, load_config
from rolloutlab.real.rundir.config import SyncConfig
from rolloutlab.real.rundir.run_checks import request_seed

from rolloutlab.commands.options.common import renamed_argument

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


def one_step(engine, step: int, cfg: SyncConfig, weights) -> tuple[float, float, int]:
    """Generate step ``step``'s requests on ``engine`` and sync ``weights`` into it:
    ``(wall s, process CPU s, generated tokens)``."""
    params = SamplingParams(cfg.temperature, cfg.top_p, cfg.max_response_length)
    reqs = step_requests(step, cfg)
    w, c = time.perf_counter(), time.process_time()
    res = engine.generate(reqs, params)
    engine.update_weights(weights, step + 1)
    return time.perf_counter() - w, time.process_time() - c, sum(len(r.response_ids) for r in res)


def main() -> None:
    """Run both engines and print their numbers and the ratio."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    new = ap.add_argument(
        "--max-num-seqs", type=int, default=64, help="sequences decoded at once per engine"
    )
    renamed_argument(ap, "--capacity", new)
    args = ap.parse_args()
    cfg = SyncConfig()
    torch.set_num_threads(cfg.torch_threads)  # as a real run (real.runners.sync.SyncRun) sets it
    clock0 = time.perf_counter()
    clock = lambda: time.perf_counter() - clock0
    policy = lambda: build_model(load_config(), seed=0)
    weights = build_model(load_config(), seed=1).state_dict()
    t = time.perf_counter()
    engines = {"torch": TorchEngine(policy(), args.max_num_seqs, clock)}
    start = {"torch": time.perf_counter() - t}
    t = time.perf_counter()
    engines["vllm"] = VllmEngine(policy(), args.max_num_seqs, clock)
    start["vllm"] = time.perf_counter() - t
    print(f"torch threads after the vLLM start: {torch.get_num_threads()}")
    torch.set_num_threads(cfg.torch_threads)
    runs: dict[str, list[tuple[float, float, int]]] = {k: [] for k in engines}
    for step in range(args.steps + 2):  # interleaved: the machine's load hits both alike
        for name, eng in engines.items():
            r = one_step(eng, step, cfg, weights)
            if step >= 2:  # two warm-up steps
                runs[name].append(r)
    engines["vllm"].close()
    print(
        f"task=digit-chain B={B} G={G} max_response_length={cfg.max_response_length} steps={args.steps}"
    )
    med = {}
    for name, rs in runs.items():
        wall, cpu, tok = (np.array(x) for x in zip(*rs))
        med[name] = (float(np.median(wall)), float(np.median(cpu)))
        print(
            f"{name}: start_s={start[name]:.1f} step_wall_s_median={med[name][0]:.3f} "
            f"step_wall_s_min={wall.min():.3f} step_cpu_s_median={med[name][1]:.3f} "
            f"tokens_per_step={tok.mean():.0f}"
        )
    pair = np.array([v[0] / t[0] for v, t in zip(runs["vllm"], runs["torch"])])
    print(
        f"paired_wall_ratio_median={np.median(pair):.2f} min={pair.min():.2f} max={pair.max():.2f}"
    )
    print(f"vllm_over_torch_step_wall={med['vllm'][0] / med['torch'][0]:.2f}")
    print(f"vllm_over_torch_step={med['vllm'][1] / med['torch'][1]:.2f}")


if __name__ == "__main__":
    main()
