"""A sweep on the fast path against the same sweep on the SimPy engine, in one process.

Grid: B in {16, 64} x workers in {1, 2} x seeds {0, 1} on the default scenario, every
default controller (static:4, static:8, static:16, sagc), 300 steps. Prints both wall
times and, last, ``sweep_fast_over_simpy=<ratio>``. SAGC runs step by step on both
engines (its G depends on what it observes), so the sweep's ratio is below the
open-loop benchmark's (bench/fast_path.py).

Usage: python bench/sweep_speed.py
"""

from __future__ import annotations

import time

from rolloutlab.sim.scenario.bundled import DEFAULT_SCENARIO
from rolloutlab.sim.scenario.scenario import load_scenario
from rolloutlab.sim.studies.sweep import grid, run_sweep

SPECS = ["static:4", "static:8", "static:16", "sagc"]


def timed(engine: str, sc, points) -> float:
    """Wall seconds of one sweep on ``engine``."""
    t0 = time.perf_counter()
    run_sweep(sc, SPECS, points, 300, engine=engine)
    return time.perf_counter() - t0


def main() -> None:
    sc = load_scenario(DEFAULT_SCENARIO)
    points = grid([16, 64], [1, 2], [sc.engine.max_num_seqs], [0, 1])
    simpy_s, fast_s = timed("simpy", sc, points), timed("fast", sc, points)
    print(f"scenario={DEFAULT_SCENARIO} points={len(points)} controllers={len(SPECS)} steps=300")
    print(f"simpy_s={simpy_s:.1f}")
    print(f"fast_s={fast_s:.1f}")
    print(f"sweep_fast_over_simpy={simpy_s / fast_s:.1f}")


if __name__ == "__main__":
    main()
