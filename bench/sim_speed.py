"""Speed of the SimPy engine as a ratio against SimPy itself, in one process.

Measures (1) simulated rollouts per second of the synchronous pipeline on the default
bundled scenario (static G=8, the scenario's prompt batch) and (2) bare SimPy timeout
events per second (one process yielding ``env.timeout(1)``), and prints as its last
line ``rollouts_per_event=<(1)/(2)>``. Target: at least 0.3. The ratio is
machine-independent to first order; record results in bench/RESULTS.md.

Usage: python bench/sim_speed.py [--steps N] [--scenario NAME]
"""

from __future__ import annotations

import argparse
import time

import simpy
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.pipelines.sync import RunConfig, run_sync
from rolloutlab.sim.scenario.bundled import DEFAULT_SCENARIO
from rolloutlab.sim.scenario.scenario import load_scenario


def bare_timeouts_per_s(n: int = 500_000) -> float:
    """SimPy timeout events processed per second by one bare process."""
    env = simpy.Environment()

    def proc():
        for _ in range(n):
            yield env.timeout(1)

    env.process(proc())
    t0 = time.perf_counter()
    env.run()
    return n / (time.perf_counter() - t0)


def best_of(fn, repeats: int = 3):
    """Highest rate of ``repeats`` runs (why: the least disturbed by other processes)."""
    return max((fn() for _ in range(repeats)), key=lambda r: r if isinstance(r, float) else r[0])


def engine_rollouts_per_s(scenario_name: str, steps: int) -> tuple[float, int]:
    """Simulated rollouts per second (wall) of ``steps`` synchronous steps, and the count."""
    sc = load_scenario(scenario_name)
    cfg = RunConfig(steps=steps, prompts=sc.run_defaults.prompts)
    t0 = time.perf_counter()
    rollouts, _ = run_sync(sc, StaticG(8), cfg)
    return rollouts.height / (time.perf_counter() - t0), rollouts.height


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--scenario", default=DEFAULT_SCENARIO)
    args = ap.parse_args()
    bare = best_of(bare_timeouts_per_s)
    rps, n = best_of(lambda: engine_rollouts_per_s(args.scenario, args.steps))
    print(f"scenario={args.scenario} steps={args.steps} rollouts={n}")
    print(f"bare_timeouts_per_s={bare:,.0f}")
    print(f"engine_rollouts_per_s={rps:,.0f}")
    print(f"rollouts_per_event={rps / bare:.3f}")


if __name__ == "__main__":
    main()
