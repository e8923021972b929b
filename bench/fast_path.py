"""Fast path against the SimPy engine, in one process; and a large fast-path run.

(1) Simulated rollouts per second of the synchronous pipeline (static G=8, the
scenario's prompt batch) on the SimPy engine and on the fast path, same scenario, same
lengths (best of 3 each); last line ``fast_over_simpy=<ratio>`` (target >= 20), on the
default bundled scenario with its own length model. The ratio with the ServeGen
group-length model of :mod:`sim.models.dynamics` (what ``rolloutlab sim --drift flat`` runs:
prompt difficulty and within-group correlation) is printed too.
(2) ``--big``: 1,000 steps x 512 prompts x G=16 (8.2M rollouts) on the fast path,
rollouts streamed to parquet; wall time and peak RSS (``resource.getrusage``).

Usage: python bench/fast_path.py [--steps N] [--big]
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import tempfile
import time
from pathlib import Path

from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.models.dynamics import servegen_lengths
from rolloutlab.sim.pipelines.sync import RunConfig, run_sync
from rolloutlab.sim.pipelines.sync_fast import run_sync_fast
from rolloutlab.sim.scenario.bundled import DEFAULT_SCENARIO
from rolloutlab.sim.scenario.scenario import load_scenario


def rate(run, sc, cfg, repeats: int = 3) -> float:
    """Best-of-``repeats`` simulated rollouts per second of ``run(sc, StaticG(8), cfg)``."""
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        rollouts, _ = run(sc, StaticG(8), cfg)
        best = max(best, rollouts.height / (time.perf_counter() - t0))
    return best


def big_run(sc) -> None:
    """1,000 x 512 x 16 on the fast path, streamed; prints time, rollouts and peak RSS."""
    cfg = RunConfig(steps=1000, prompts=512)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rollouts.parquet"
        t0 = time.perf_counter()
        _, steps = run_sync_fast(sc, StaticG(16), cfg, rollout_path=path, chunk_steps=16)
        wall = time.perf_counter() - t0
        size = path.stat().st_size
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"big_run steps={steps.height} rollouts={1000 * 512 * 16:,} wall_s={wall:.1f} "
        f"parquet_mib={size / 2**20:.0f} peak_rss_mib={peak_mib:.0f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--scenario", default=DEFAULT_SCENARIO)
    ap.add_argument("--big", action="store_true")
    args = ap.parse_args()
    base = load_scenario(args.scenario)
    sc = dataclasses.replace(
        base, lengths=servegen_lengths(max_response_length=base.lengths.max_response_length)
    )
    if args.big:
        big_run(sc)
        return
    cfg = RunConfig(steps=args.steps, prompts=sc.run_defaults.prompts)
    group = rate(run_sync_fast, sc, cfg) / rate(run_sync, sc, cfg)
    simpy_rps, fast_rps = rate(run_sync, base, cfg), rate(run_sync_fast, base, cfg)
    print(
        f"scenario={args.scenario} lengths={type(base.lengths).__name__} steps={args.steps} "
        f"prompts={cfg.prompts} G=8"
    )
    print(f"servegen_group_lengths_fast_over_simpy={group:.1f}")
    print(f"simpy_rollouts_per_s={simpy_rps:,.0f}")
    print(f"fast_rollouts_per_s={fast_rps:,.0f}")
    print(f"fast_over_simpy={fast_rps / simpy_rps:.1f}")


if __name__ == "__main__":
    main()
