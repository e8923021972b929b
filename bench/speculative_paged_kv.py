"""Speculative decoding under KV pressure in the paged engine: preemptions
and step time, plain against n-gram and draft-model speculation.

One synchronous step per seed on one paged worker (:mod:`sim.engine.speculative_paged_lane`):
16 prompts of 300 tokens x 8 samples, lognormal lengths (``exp(N(7, 0.8))``, capped at
8,000), Qwen2.5-3B/H100 roofline cost, ``max_num_seqs`` 128, block size 16, ``--kv`` blocks
(2,500 by default: preemptions in every arm). ``--speculative`` ``k = 4``, ``alpha = 0.7``; the
draft-model arm (``draft_cost = 0.1``) also reserves ``k`` lookahead slots per sequence.
Prints one line per seed: ``seed``, then ``(preemptions, step seconds)`` for plain,
n-gram and draft model.

Usage: python bench/speculative_paged_kv.py [--kv 2500] [--seeds 3]
"""

from __future__ import annotations

import argparse

import numpy as np
from rolloutlab.sim.engine.core import EngineConfig, generate
from rolloutlab.sim.engine.speculative import SpeculativeDecoding
from rolloutlab.sim.models.roofline import roofline, roofline_cost


def main() -> None:
    """Parse the flags, run every arm per seed, print the lines (module doc)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kv", type=int, default=2500)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    cost = roofline_cost(roofline("qwen2.5-3b", "h100"))
    for seed in range(args.seeds):
        rng = np.random.default_rng(seed)
        L = np.minimum(np.ceil(np.exp(rng.normal(7.0, 0.8, size=(16, 8)))), 8000).astype(int)
        arms = (
            None,
            SpeculativeDecoding(4, 0.7, seed=seed),
            SpeculativeDecoding(4, 0.7, draft_cost=0.1, seed=seed),
        )
        out = []
        for spec in arms:
            cfg = EngineConfig(max_num_seqs=128, kv_blocks=args.kv, block_size=16, spec=spec)
            b = generate(L, np.full(16, 300), cost, cfg)
            out.append((int(b.preemptions.sum()), round(float(b.t_finish.max()), 1)))
        print(seed, *out)


if __name__ == "__main__":
    main()
