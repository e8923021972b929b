"""The length distribution of the digit-chain task's correct solutions (numbers).

Used by ``rolloutlab real task-lengths`` to make docs/real_task.md's figure (drawn by
:func:`analysis.figures.plots.task_lengths_figure`). No torch.
"""

from __future__ import annotations

import numpy as np
from rolloutlab.real.tasks.digit_chain import TaskConfig, sample_n_digits


def solution_lengths(cfg: TaskConfig, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Response lengths (tokens, EOS included) of ``n`` problems' correct solutions:
    ``{"short": (n,), "long": (n,)}`` (``n + 3`` and ``4 n + 3`` for ``n`` digits)."""
    digits = sample_n_digits(np.random.default_rng(seed), cfg, n)
    return {"short": digits + 3, "long": 4 * digits + 3}


def summary(lengths: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Median, p90, p99, max and max/median per format."""
    out = {}
    for name, x in lengths.items():
        med = float(np.median(x))
        out[name] = {
            "median": med,
            "p90": float(np.quantile(x, 0.9)),
            "p99": float(np.quantile(x, 0.99)),
            "max": float(x.max()),
            "max/median": float(x.max() / med),
        }
    return out
