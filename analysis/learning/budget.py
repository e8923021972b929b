"""The published-findings study of the learning law (``rolloutlab compare learning-budget``,
docs/learning.md §6): at a fixed rollout budget, which group size G learns most?

For every budget ``R`` (total rollouts) and group size ``G`` at ``B`` prompts per step, a
run of ``T = R // (B G)`` steps is drawn ``draws`` times from the learning law
(:func:`calibration.fits.learning_draws.draw_rewards`: fresh prompts with ``p0 ~ Beta(a, b)``,
binomial rewards, the law's drive with its noise term, lr = lr_ref, no dynamic sampling);
a run's reward is its mean reward over its last ``ceil(T / 10)`` steps. Reported per
(R, G): mean and sd over the draws; per R: the best G; and G = 2's reward as a share of
G = 16's at equal rollouts (2-GRPO's comparison, PAPERS.md §3).
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from rolloutlab.calibration.fits.learning_draws import draw_rewards
from rolloutlab.sim.models.learning import LearningParams


def budget_study(
    params: LearningParams,
    beta: tuple[float, float],
    budgets: list[int],
    group_sizes: list[int],
    prompts: int,
    draws: int = 64,
    seed: int = 0,
) -> pl.DataFrame:
    """One row per (budget, G): ``budget`` (rollouts), ``G``, ``B``, ``steps``,
    ``reward_mean``, ``reward_sd`` (over draws), ``initial_reward`` (Beta mean).
    Raises ValueError on a budget below one step of some G (``B G`` rollouts)."""
    a, b = beta
    rows = []
    for R in budgets:
        for G in group_sizes:
            T = R // (prompts * G)
            if T < 1:
                raise ValueError(f"budget {R}: below one step of G={G}, B={prompts}")
            rng = np.random.default_rng([seed, R, G])
            ones = np.ones(T)
            reward = draw_rewards(
                params, a, b, ones * G, ones * params.lr_ref, ones * prompts, False, draws, rng
            )  # (draws, T)
            tail = reward[:, -math.ceil(T / 10) :].mean(axis=1)
            rows.append({"budget": R, "G": G, "B": prompts, "steps": T,
                         "reward_mean": float(tail.mean()), "reward_sd": float(tail.std()),
                         "initial_reward": a / (a + b)})  # fmt: skip
    return pl.DataFrame(rows)


def budget_summary(table: pl.DataFrame) -> pl.DataFrame:
    """Per budget: the best G (highest mean reward) and, when G = 2 and 16 are in the
    table, ``g2_share_of_g16`` = reward(G=2) / reward(G=16) and the same for the gain over
    the initial reward (``g2_share_of_g16_gain``)."""
    rows = []
    for R in sorted(set(table["budget"].to_list())):
        t = table.filter(pl.col("budget") == R)
        best = t.sort("reward_mean", descending=True).row(0, named=True)
        row = {"budget": R, "best_G": best["G"], "best_reward": best["reward_mean"]}
        r = dict(zip(t["G"].to_list(), t["reward_mean"].to_list(), strict=True))
        if 2 in r and 16 in r:
            r0 = float(t["initial_reward"][0])
            gain16 = r[16] - r0
            row["g2_share_of_g16"] = r[2] / r[16]
            row["g2_share_of_g16_gain"] = (r[2] - r0) / gain16 if gain16 > 0 else None
        rows.append(row)
    return pl.DataFrame(rows)
