"""Figure for docs/engine.md: batch occupancy and iteration time over one long-tailed step.

One synchronous step of 64 prompts x G=8 with ServeGen long-reasoning lengths
(:func:`sim.models.dynamics.servegen_lengths`, 16k cap) on one Qwen2.5-3B / H100 worker
(roofline cost, KV blocks from 0.9 of its memory, ``max_num_seqs=256``,
``max_num_batched_tokens=8192``), run by the per-iteration reference loop
(:func:`tests.reference.kv_loop.paged_reference` with ``record=True``).

Usage: python bench/occupancy_figure.py [--out docs/engine_occupancy.png]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from rolloutlab.sim.engine.core import EngineConfig
from rolloutlab.sim.models.dynamics import servegen_lengths
from rolloutlab.sim.models.roofline import roofline, roofline_cost

# the exact reference loop lives with the tests, which the installed package does not ship
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.reference.kv_loop import paged_reference


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/engine_occupancy.png")
    args = ap.parse_args()
    roof = roofline("qwen2.5-3b", "h100")
    lengths = servegen_lengths(max_response_length=16384).sample_ids(0, 0, np.arange(64), 8)
    cfg = EngineConfig(max_num_seqs=256, kv_blocks=roof.kv_blocks(), max_num_batched_tokens=8192)
    run = paged_reference(lengths, np.full(64, 256), roofline_cost(roof), cfg, record=True)
    tl = run.timeline
    t = tl["t_start_s"] + tl["dt_s"]
    fig, ax = plt.subplots(figsize=(6.4, 3.2), dpi=110)
    ax.step(t, tl["running"], where="post", color="C0", lw=1)
    ax.set_xlabel("time in the step (s)")
    ax.set_ylabel("running sequences", color="C0")
    ax2 = ax.twinx()
    ax2.plot(t, tl["dt_s"] * 1e3, color="C3", lw=0.6, alpha=0.7)
    ax2.set_ylabel("iteration time (ms)", color="C3")
    ax2.set_ylim(0, 1.5e3 * np.percentile(tl["dt_s"], 99))  # (why: the first prefill spikes)
    half = t > 0.5 * t[-1]
    ax.set_title(
        f"one step, {lengths.size} rollouts: last half of the step runs "
        f"<= {tl['running'][half].max()} sequences",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(args.out)
    print(
        f"wrote {args.out}: makespan {t[-1]:.1f} s, {len(t)} iterations, "
        f"preemptions {run.preemptions.sum()}, max KV blocks {run.max_kv_blocks_used[0]} "
        f"of {cfg.kv_blocks}"
    )


if __name__ == "__main__":
    main()
