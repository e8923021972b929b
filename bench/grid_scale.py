"""The same sweep grid through the local executor, Ray with 1 worker and Ray with 2
workers, in one process, each through the CLI's path (executor -> grid.jsonl).

Grid: B in {64, 256} x workers {1, 2} x seeds 0-3 on the default scenario, the
default controllers (static:4, static:8, static:16, sagc), 300 steps, fast path: 16 points
of about a second each. Ray runs on a local runtime started with 1 or 2 CPUs (one worker
process per CPU); its start (``ray.init``) is timed separately and not in the grid time.
Each executor runs the grid ``--repeats`` times (default 3) and the fastest is kept (the
machine is shared: the minimum is the least disturbed run; the first repeat on Ray
includes the workers' cold start, importing rolloutlab). Checks that the three tables
are identical. Prints every time and, last,
``ray_speedup_2=<t(ray, 1 worker) / t(ray, 2 workers)>`` and
``ray_overhead=<t(ray, 1 worker) / t(local)>``.

Usage: python bench/grid_scale.py   (needs the ray extra; run it on an otherwise idle
machine: the 2-worker time needs two free cores)
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time

from rolloutlab.sim.scenario.bundled import DEFAULT_SCENARIO
from rolloutlab.sim.scenario.scenario import load_scenario
from rolloutlab.sim.studies.sweep import grid, run_point

from rolloutlab.commands.grid.executor import LocalExecutor, RayExecutor
from rolloutlab.commands.grid.store import GridStore

SPECS = ["static:4", "static:8", "static:16", "sagc"]


def timed(executor, fn, points, repeats: int) -> tuple[float, list[float], object]:
    """(start seconds, grid seconds of each repeat, table) of ``repeats`` runs of the grid
    on one ``executor`` (started once: the first repeat pays the workers' cold start)."""
    t0 = time.perf_counter()
    executor.check()
    start = time.perf_counter() - t0
    times = []
    try:
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as d:
                store = GridStore(d, "bench", {"specs": SPECS}, points)
                store.open(resume=False)
                t1 = time.perf_counter()
                executor.run(fn, list(enumerate(points)), store.record)
                times.append(time.perf_counter() - t1)
                table = store.table()
    finally:
        executor.close()
    return start, times, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per executor (min is kept)")
    args = parser.parse_args()
    sc = load_scenario(DEFAULT_SCENARIO)
    points = grid([64, 256], [1, 2], [sc.engine.max_num_seqs], [0, 1, 2, 3])
    fn = functools.partial(run_point, scenario=sc, specs=SPECS, steps=300, engine="fast")
    _, local, t_local = timed(LocalExecutor(), fn, points, args.repeats)
    init1, ray1, t_ray1 = timed(RayExecutor(max_parallel=1), fn, points, args.repeats)
    init2, ray2, t_ray2 = timed(RayExecutor(max_parallel=2), fn, points, args.repeats)
    assert t_local.equals(t_ray1) and t_local.equals(t_ray2), "executors gave different tables"
    print(f"scenario={DEFAULT_SCENARIO} points={len(points)} controllers={len(SPECS)} steps=300")
    for name, ts, init in (("local", local, None), ("ray1", ray1, init1), ("ray2", ray2, init2)):
        extra = "" if init is None else f" (ray.init {init:.1f} s, not included)"
        print(f"{name}_s={min(ts):.1f} runs={' '.join(f'{t:.1f}' for t in ts)}{extra}")
    print(f"ray_speedup_2={min(ray1) / min(ray2):.2f} ray_overhead={min(ray1) / min(local):.2f}")


if __name__ == "__main__":
    main()
