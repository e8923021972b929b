"""Vectorised batch vs plain per-run loop on the default stability grid (same process).

Prints the speed ratio; asserts both paths give the same collapse steps. Run:
``.venv/bin/python bench/stability_speed.py``.
"""

import time

import numpy as np
from rolloutlab.sim.models.staleness import StalenessParams, simulate, simulate_batch
from rolloutlab.sim.studies.stability import default_lrs

P, T, SEEDS = StalenessParams(), 1000, 4
S, lr, seed = map(
    np.ravel, np.meshgrid([1, 2, 4, 8, 16, 32], default_lrs(), np.arange(SEEDS), indexing="ij")
)

t0 = time.perf_counter()
fast = simulate_batch(P, S, lr, T, seed)
t_fast = time.perf_counter() - t0
sub = np.arange(0, S.size, 5)  # every 5th run: the loop is slow; scaled up below
t0 = time.perf_counter()
slow = [simulate(P, int(S[i]), float(lr[i]), T, int(seed[i])) for i in sub]
t_slow = (time.perf_counter() - t0) * S.size / sub.size
assert [fast[i].t_collapse for i in sub] == [r.t_collapse for r in slow]
print(
    f"{S.size} runs x {T} steps: vectorised {t_fast:.2f} s, plain loop ~{t_slow:.2f} s, "
    f"ratio {t_slow / t_fast:.1f}x"
)
