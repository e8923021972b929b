"""Pass-rate coupling likelihood (``calibration.fits.passrate_fit.conditional_nll``): the
vectorised elementary-symmetric recursion against the per-group
``numpy.polynomial.polynomial.polyfromroots`` form it replaced, on the informative groups
of the four graph-walk runs in ``tests/data/groups`` (the ``calibrate groups`` input that
took minutes), in this one process.

Prints the groups, best-of-N seconds per likelihood evaluation of each, the largest
relative difference of their values, and the ratio. Usage: ``python bench/coupling_fit.py [N]``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from numpy.polynomial import polynomial as P
from rolloutlab.calibration.fits.passrate_fit import conditional_nll, standardised_log_length
from rolloutlab.calibration.readers.grouped import FieldNames, read_grouped

DATA = Path(__file__).parent.parent / "tests" / "data" / "groups"
RUNS = ["graph_walk", "graph_walk_seed1", "graph_walk_seed2", "graph_walk_seed3"]


def per_group_nll(c: float, groups) -> float:
    """The replaced form: one ``polyfromroots`` per group (the baseline)."""
    total = 0.0
    for z, y in groups:
        k = int(y.sum())
        u = c * z
        shift = u.max()
        coef = P.polyfromroots(-np.exp(u - shift))
        total -= u[y].sum() - k * shift - np.log(coef[len(z) - k])
    return total


def best_of(f, n: int) -> float:
    """Best wall seconds of ``n`` calls of ``f``."""
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    trace = read_grouped([DATA / r / "samples.parquet" for r in RUNS], FieldNames(), None)
    groups = [
        (standardised_log_length(L.astype(float)), r.astype(bool))
        for r, L in zip(trace.flat("reward"), trace.flat("length"), strict=True)
        if 0 < r.sum() < r.size
    ]
    diff = max(
        abs(conditional_nll(c, groups) / per_group_nll(c, groups) - 1) for c in (-2.0, -0.6, 1.0)
    )
    new = best_of(lambda: conditional_nll(-0.6, groups), n)
    old = best_of(lambda: per_group_nll(-0.6, groups), n)
    print(f"informative_groups={len(groups)}")
    print(f"vectorised_s={new:.4f}")
    print(f"per_group_polyfromroots_s={old:.4f}")
    print(f"max_relative_difference={diff:.1e}")
    print(f"per_group_over_vectorised={old / new:.1f}")
