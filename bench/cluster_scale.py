"""A campaign the size peers simulate: 1,024 GPUs (128 replicas of TP 8) in bounded memory.

Runs ``rolloutlab sim`` in this process (the command a user runs: simulation, rollouts
streamed to parquet, summaries read back lazily) on the fast synchronous path, Qwen2.5-7B
on H100, TP 8 per replica, G = 16, ``B = 8 x replicas`` (the same load per replica at
every size: 1,024 prompts at 128 replicas), for ``--steps`` steps (default 1,000:
16.4 M rollouts at 128 replicas), at 128 replicas first and then at each smaller size,
then the 64-worker run (64 replicas, B = 256: 4.1 M rollouts, 2.85 GiB peak
before rollouts were streamed), the baseline of the ratios.

Prints one line per run: GPUs, B, rollouts, wall seconds, the ratio to the 64-worker
B = 256 run and the process's peak RSS so far (``resource.getrusage``; the first line's
is the 1,024-GPU run's own peak, the later ones can only be higher). The bound:
peak RSS < 1 GiB at 1,024 GPUs. Results in bench/RESULTS.md.

Usage: python bench/cluster_scale.py [--steps 1000] [--runs 128:1024,64:512,32:256,16:128,64:256]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import time
from pathlib import Path

from rolloutlab.cli import main as cli

TP, G = 8, 16
BASELINE = (64, 256)
"""(replicas, B) of the run the others are timed against."""


def run(replicas: int, prompts: int, steps: int, out: Path) -> float:
    """Wall seconds of one ``rolloutlab sim`` at ``replicas`` replicas of TP 8."""
    argv = [
        "sim", "--model", "qwen2.5-7b", "--gpu", "h100", "--tp", str(TP),
        "--workers", str(replicas), "--no-kv-cache", "--engine", "fast",
        "--prompts", str(prompts), "--controller", f"static:{G}",
        "--steps", str(steps), "--out", str(out), "--no-figure",
    ]  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    cli(argv, standalone_mode=False)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--runs", default="128:1024,64:512,32:256,16:128,64:256")
    ap.add_argument("--out", default="runs/bench_cluster")
    args = ap.parse_args()
    runs = [tuple(int(x) for x in r.split(":")) for r in args.runs.split(",")]
    rows = []
    for r, B in runs:
        wall = run(r, B, args.steps, Path(args.out) / f"replicas_{r}_B{B}")
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        rows.append((r, B, wall, rss))
    base = {(r, B): w for r, B, w, _ in rows}.get(BASELINE)
    print(f"steps={args.steps} tp={TP} G={G}")
    for r, B, wall, rss in rows:
        ratio = f"{wall / base:.2f}" if base else "n/a"
        print(
            f"gpus={r * TP} replicas={r} B={B} rollouts={args.steps * B * G:,} "
            f"wall_s={wall:.1f} over_64_workers_B256={ratio} peak_rss_mib_so_far={rss:.0f}"
        )


if __name__ == "__main__":
    main()
