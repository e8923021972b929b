"""Within-group correlation of log response lengths (intra-class correlation, ICC).

verl step logs pool all ``B*G`` lengths of a step, so they give the total log spread
``sigma`` but not its split into prompt difficulty (``sigma_prompt``) and sampling noise
within a group (``sigma_within``). The split comes from data with groups:
``sim/data/lengths/math_cot_100_char_lengths.csv`` (100 MATH prompts x 8 sampled
responses of a Qwen2.5-Math-Instruct model; character lengths, see the SOURCE note there;
the simulator's length dynamics read the same table).

Why characters are enough: if ``tokens = chars / k`` with a constant ``k`` (chars per
token), then ``log tokens = log chars - log k``: a shift, which changes neither variance
component, so the ICC of log lengths is unit-free. A ``k`` that varies between texts
adds its own variance to the within-group part, so the ICC from characters is, if
anything, slightly low.

Estimator: one-way random-effects ANOVA ICC(1) (Shrout & Fleiss 1979, case 1), written
once in :func:`sim.models.dynamics.fit_icc` (``(MSB - MSW) / (MSB + (k - 1) MSW)``, the
same number as ``(F - 1) / (F + k - 1)`` with ``F = MSB / MSW`` the one-way ANOVA F
statistic); here it is clipped to [0, 1], the range a correlation parameter takes.
"""

from __future__ import annotations

from importlib import resources

import numpy as np
import polars as pl
from rolloutlab.sim.models.dynamics import fit_icc

GROUP_TABLE = "math_cot_100_char_lengths.csv"


def load_group_lengths(path: str | None = None) -> pl.DataFrame:
    """The per-group length table (columns ``idx, level, sample_idx, chars``); the bundled
    one by default. Raises: ValueError if a column is missing or a length is < 1."""
    if path is None:
        with (
            resources.files("rolloutlab.sim")
            .joinpath("data", "lengths", GROUP_TABLE)
            .open("rb") as f
        ):
            df = pl.read_csv(f)
        path = f"sim/data/lengths/{GROUP_TABLE}"
    else:
        df = pl.read_csv(path)
    for col in ("idx", "chars"):
        if col not in df.columns:
            raise ValueError(f"{path}: missing column {col!r}")
    bad = df.filter(pl.col("chars") < 1)
    if bad.height:
        raise ValueError(f"{path}: row {bad.row(0, named=True)}: field 'chars' must be >= 1")
    return df


def icc_log_lengths(df: pl.DataFrame) -> float:
    """ICC(1) of ``log(chars)`` grouped by ``idx`` (formula in the module docstring),
    clipped to [0, 1]. Needs equal group sizes >= 2. Raises: ValueError otherwise."""
    groups = [
        g["chars"].to_numpy().astype(float) for _, g in df.group_by("idx", maintain_order=True)
    ]
    sizes = {len(g) for g in groups}
    if len(sizes) != 1 or min(sizes) < 2 or len(groups) < 2:
        raise ValueError(
            f"icc_log_lengths: need >= 2 groups of one size >= 2, got sizes {sorted(sizes)}"
        )
    return float(np.clip(fit_icc(np.stack(groups)), 0.0, 1.0))  # (n_groups, k) lengths


def bundled_icc() -> float:
    """ICC of the bundled table (see :func:`icc_log_lengths`)."""
    return icc_log_lengths(load_group_lengths())
