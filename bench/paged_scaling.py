"""How the paged-KV engine's run time grows with the number of requests, as a ratio in
one process.

Workload (the side-by-side comparison with Vidur): Llama-3-8B
(``llama-3-8b``) on one A100-80GB SXM (``a100``) with the roofline cost of
:mod:`sim.models.roofline` (defaults: ``gpu_memory_utilization`` 0.9, 16-token blocks, so
26,674 KV blocks); one replica, ``max_num_seqs`` 256, no token budget, prefix caching on
(every request has its own prompt, so nothing is shared). ``N`` requests, all submitted
at time 0 as one batch, each with a 256-token prompt and a lognormal decode length
``ceil(exp(mu + sigma z))``, ``z`` standard normal, clipped to ``[1, 7936]`` (Llama-3-8B's
8,192-token context minus the prompt): ``mu = 7.0`` (median ~1,097 tokens), ``sigma =
1.0`` (mean ~1,650 after clipping). That keeps the KV cache full for most of the run:
the engine preempts by recompute (the regime the paged engine exists for). Lengths come
from :class:`sim.models.lengths.LognormalLengths` (counter-based draws keyed on seed 0 and the
request number), so the first 2,048 of the 8,192 requests are the 2,048-request run.

Timed: ``Engine.submit`` plus ``env.run`` (the simulation call only; building the
lengths and the engine is outside), wall clock, best of ``--repeats`` runs of each size,
the sizes alternating (why: the least disturbed run, and both sizes under the same load
of a shared machine); the process's CPU time is printed beside it. Also printed: the
iteration boundaries the worker scheduled (the simulated work: fixed by the scheduling
rules and the order of the float sums, so no implementation can skip them) and their
ratio, and the ratio of CPU time per boundary (1.0 when the run costs the same per
simulated scheduling point at both sizes). The last line is ``paged_scaling=<time(8192) / time(2048)>``; 4x the requests at
linear cost gives 4.0. Record results in bench/RESULTS.md.

Usage: python bench/paged_scaling.py [--repeats 3] [--mu 7.0] [--sigma 1.0] [--streaming]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import simpy
from rolloutlab.sim.engine.core import Engine, EngineConfig
from rolloutlab.sim.models.lengths import LognormalLengths
from rolloutlab.sim.models.roofline import roofline, roofline_cost

PROMPT_TOKENS = 256
CONTEXT = 8192  # Llama-3-8B max_position_embeddings
SIZES = (2048, 8192)


def run_once(n: int, args: argparse.Namespace) -> tuple[float, float, float, int, int]:
    """Simulate ``n`` requests; returns ``(wall s, CPU s of the simulation call, simulated
    makespan s, preemptions, iteration boundaries scheduled)``."""
    cfg = roofline("llama-3-8b", "a100")
    cost = roofline_cost(cfg)
    lengths = LognormalLengths(args.mu, 0.0, args.sigma, CONTEXT - PROMPT_TOKENS)
    resp = lengths.sample_ids(0, 0, np.arange(n), 1).ravel()  # (n,) decode tokens
    env = simpy.Environment()
    engine = Engine(env, cost, EngineConfig(max_num_seqs=256, kv_blocks=cfg.kv_blocks()))
    t0, c0 = time.perf_counter(), time.process_time()
    batch = engine.submit(
        np.arange(n), np.full(n, PROMPT_TOKENS), resp, exclusive=not args.streaming
    )
    env.run(until=batch.done)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return wall, cpu, env.now, int(batch.preemptions.sum()), engine.workers[0].boundaries


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mu", type=float, default=7.0, help="mean of log decode length")
    ap.add_argument("--sigma", type=float, default=1.0, help="spread of log decode length")
    ap.add_argument(
        "--streaming",
        action="store_true",
        help="submit as a streaming batch (one SimPy event per segment) instead of exclusive",
    )
    args = ap.parse_args()
    runs: dict[int, list] = {n: [] for n in SIZES}
    for _ in range(args.repeats):
        for n in SIZES:
            runs[n].append(run_once(n, args))
    best, cpu, bounds = {}, {}, {}
    for n in SIZES:
        best[n], cpu[n] = min(r[0] for r in runs[n]), min(r[1] for r in runs[n])
        _, _, makespan, preempt, bounds[n] = runs[n][0]
        walls = ", ".join(f"{r[0]:.3f}" for r in runs[n])
        print(
            f"requests={n} wall_s=[{walls}] best_s={best[n]:.3f} cpu_s={cpu[n]:.3f} "
            f"makespan_s={makespan:.1f} preemptions={preempt} boundaries={bounds[n]} "
            f"us_per_boundary={1e6 * best[n] / bounds[n]:.1f}"
        )
    print(f"boundary_ratio={bounds[SIZES[1]] / bounds[SIZES[0]]:.2f}")
    print(f"cpu_ratio={cpu[SIZES[1]] / cpu[SIZES[0]]:.2f}")
    per = [cpu[n] / bounds[n] for n in SIZES]  # (flat when the engine is linear in its work)
    print(f"cpu_per_boundary_ratio={per[1] / per[0]:.2f}")
    print(f"paged_scaling={best[SIZES[1]] / best[SIZES[0]]:.2f}")


if __name__ == "__main__":
    main()
