"""How much response lengths spread within a group and a step, and how hard the prompts
are, for a task's warm-started policy (``rolloutlab real task-spread``, docs/real_task.md).

Sample ``j`` of a prompt has the same seed whatever ``G`` (:func:`real.runners.sync.request_seed`),
so the first ``G'`` samples of a ``G = 16`` draw are exactly what a ``static:G'`` run's
first step would generate; one draw at ``G_max`` gives every smaller ``G``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def icc_log(lengths: np.ndarray) -> float:
    """One-way random-effects ICC(1) of ``log(lengths)``, ``lengths`` ``(n_groups, G)``:
    ``(MSB - MSW) / (MSB + (G - 1) MSW)`` (Shrout & Fleiss 1979, ICC(1,1)): the share of
    log-length variance that lies between prompts (1: a group's lengths are equal).

    Raises: ValueError for fewer than 2 groups or ``G < 2``.
    """
    x = np.log(np.asarray(lengths, dtype=np.float64))
    n, g = x.shape
    if n < 2 or g < 2:
        raise ValueError(f"icc_log: need >= 2 groups of >= 2, got shape {x.shape}")
    means = x.mean(axis=1)
    msb = g * ((means - x.mean()) ** 2).sum() / (n - 1)
    msw = ((x - means[:, None]) ** 2).sum() / (n * (g - 1))
    return float((msb - msw) / (msb + (g - 1) * msw))


def spread_stats(lengths: np.ndarray, correct: np.ndarray, sizes: tuple[int, ...]) -> dict:
    """Spread and difficulty of ``lengths`` / ``correct``, both ``(steps, B, G_max)``
    (tokens, EOS included / bool), for each ``G`` in ``sizes`` (its first ``G`` samples).

    Per ``G``: ``group_ratio_median``, ``group_ratio_p90`` (within-group max/median),
    ``step_ratio_median``, ``step_ratio_p10`` and ``step_ratio_frac_gt4`` (max/median
    over a step's ``B x G`` rollouts, ``sim.trace.metrics.straggler_ratio``), ``icc_log``.
    ``pass_rate``: quantiles of the per-prompt pass rate at ``G_max`` and the shares of
    prompts with pass rate 0, in (0, 0.5), in [0.5, 1) and 1.
    """
    steps, B, g_max = lengths.shape
    out: dict[str, Any] = {"steps": steps, "prompts": B}
    for G in sizes:
        x = lengths[:, :, :G].astype(np.float64)
        group = (x.max(axis=2) / np.median(x, axis=2)).ravel()
        step = x.reshape(steps, -1).max(axis=1) / np.median(x.reshape(steps, -1), axis=1)
        out[f"G={G}"] = {
            "group_ratio_median": float(np.median(group)),
            "group_ratio_p90": float(np.quantile(group, 0.9)),
            "step_ratio_median": float(np.median(step)),
            "step_ratio_p10": float(np.quantile(step, 0.1)),
            "step_ratio_frac_gt4": float(np.mean(step > 4)),
            "icc_log": icc_log(x.reshape(steps * B, G)),
            "length_median": float(np.median(x)),
        }
    p = correct.reshape(steps * B, g_max).mean(axis=1)
    out["pass_rate"] = {
        "mean": float(p.mean()),
        **{f"q{int(q * 100)}": float(np.quantile(p, q)) for q in (0.1, 0.25, 0.5, 0.75, 0.9)},
        "share_unsolved": float(np.mean(p == 0)),
        "share_hard": float(np.mean((p > 0) & (p < 0.5))),
        "share_easy": float(np.mean((p >= 0.5) & (p < 1))),
        "share_solved": float(np.mean(p == 1)),
    }
    return out


def measure_start(cfg: Any, steps: int, g_max: int, cache_dir: Path | None, work: Path) -> dict:
    """Draw ``steps`` steps of ``cfg.prompts`` prompts x ``g_max`` samples from the
    warm-started policy of ``cfg`` (a :class:`real.rundir.config.SyncConfig`; warm start cached in
    ``work`` and ``cache_dir``) with the run's own prompts and seeds; returns
    :func:`spread_stats` for ``G`` = 4, 8, 16 (those ``<= g_max``)."""
    import time

    import torch
    from rolloutlab.real.engines.interface import RolloutRequest
    from rolloutlab.real.engines.sampling import SamplingParams
    from rolloutlab.real.engines.torch_engine import TorchEngine
    from rolloutlab.real.policy.model import load_config
    from rolloutlab.real.policy.warmstart import cached_warm_start
    from rolloutlab.real.runners.sync import request_seed

    torch.set_num_threads(cfg.torch_threads)
    ops = cfg.task_ops
    exclude = frozenset(p.prompt_text for p in ops.heldout(cfg.eval_size))
    model = cached_warm_start(work, load_config(), ops, cfg.warm_start, exclude, cache_dir)
    engine = TorchEngine(model, cfg.capacity * 4, time.perf_counter)
    params = SamplingParams(cfg.temperature, cfg.top_p, cfg.max_response_length)
    B = cfg.prompts
    lengths = np.zeros((steps, B, g_max), dtype=np.int64)
    correct = np.zeros((steps, B, g_max), dtype=bool)
    for t in range(steps):
        problems = ops.sample(np.random.default_rng([cfg.seed, t, 7]), B, exclude)
        reqs = [
            RolloutRequest(p * g_max + j, tuple(pr.prompt_ids), request_seed(cfg.seed, t, p, j))
            for p, pr in enumerate(problems)
            for j in range(g_max)
        ]
        for r in engine.generate(reqs, params):
            p, j = divmod(r.request_id, g_max)
            lengths[t, p, j] = len(r.response_ids)
            correct[t, p, j] = ops.correct(problems[p], r.response_ids)
    return spread_stats(lengths, correct, tuple(G for G in (4, 8, 16) if G <= g_max))
