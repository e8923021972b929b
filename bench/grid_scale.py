"""The same sweep grid through the local executor, Ray with 1 worker and Ray with 2
workers, in one process, each through the CLI's path (executor -> grid.jsonl).

Grid: B in {64, 256} x workers {1, 2} x seeds 0-7 on the default scenario, the
default controllers (static:4, static:8, static:16, sagc), 300 steps, fast path: 32 points
of about a second each. Ray runs on a local runtime started with 1 or 2 CPUs (one worker
process per CPU); its start (``ray.init``) is timed separately and not in the grid time,
which does include the workers' cold start (importing rolloutlab on the first task).
Checks that the three tables are identical. Prints the times and, last,
``ray_speedup_2=<t(ray, 1 worker) / t(ray, 2 workers)>`` and
``ray_overhead=<t(ray, 1 worker) / t(local)>``.

Usage: python bench/grid_scale.py   (needs the ray extra; run it on an otherwise idle
machine: the 2-worker time needs two free cores)
"""

from __future__ import annotations

import functools
import tempfile
import time

from rolloutlab.sim.scenario import DEFAULT_SCENARIO, load_scenario
from rolloutlab.sim.sweep import grid, run_point

from rolloutlab.commands.executor import LocalExecutor, RayExecutor
from rolloutlab.commands.grid_options import run_points
from rolloutlab.commands.grid_store import GridStore

SPECS = ["static:4", "static:8", "static:16", "sagc"]


def timed(executor, fn, points) -> tuple[float, float, object]:
    """(start seconds, grid seconds, table) of one run of the grid on ``executor``."""
    t0 = time.perf_counter()
    executor.check()
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        store = GridStore(d, "bench", {"specs": SPECS}, points)
        run_points(executor, store, fn, False, "bench")
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1, store.table()


def main() -> None:
    sc = load_scenario(DEFAULT_SCENARIO)
    points = grid([64, 256], [1, 2], [sc.engine.max_num_seqs], list(range(8)))
    fn = functools.partial(run_point, scenario=sc, specs=SPECS, steps=300, engine="fast")
    _, local_s, local = timed(LocalExecutor(), fn, points)
    init1, ray1_s, ray1 = timed(RayExecutor(max_parallel=1), fn, points)
    init2, ray2_s, ray2 = timed(RayExecutor(max_parallel=2), fn, points)
    assert local.equals(ray1) and local.equals(ray2), "executors gave different tables"
    print(f"scenario={DEFAULT_SCENARIO} points={len(points)} controllers={len(SPECS)} steps=300")
    print(f"local_s={local_s:.1f}")
    print(f"ray1_s={ray1_s:.1f} (ray.init {init1:.1f} s, not included)")
    print(f"ray2_s={ray2_s:.1f} (ray.init {init2:.1f} s, not included)")
    print(f"ray_speedup_2={ray1_s / ray2_s:.2f} ray_overhead={ray1_s / local_s:.2f}")


if __name__ == "__main__":
    main()
