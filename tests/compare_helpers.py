"""Synthetic traced runs for the comparison tests: known lengths and cost, written with sim.trace.schema."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
from rolloutlab.calibration.fits.prompt_lengths import PromptLognormalLengths
from rolloutlab.sim.engine.core import EngineConfig, generate
from rolloutlab.sim.engine.static_batch import static_generate
from rolloutlab.sim.models.cost import LinearCost
from rolloutlab.sim.models.lengths import finish_reasons
from rolloutlab.sim.trace import schema as trace

COST = LinearCost(a_s=2e-3, b_s=5e-5, c_s=1e-6, prefill_s_per_token=3e-5)
LENGTHS = PromptLognormalLengths(
    alpha=1.0, beta=1.0, sigma_prompt=0.1, sigma_within=0.3, max_response_length=72
)


def write_run(
    out: Path,
    group_sizes: list[int],
    prompts: int = 4,
    capacity: int = 16,
    slow: dict[int, float] | None = None,
    seed: int = 0,
    batching: str = "continuous",
) -> Path:
    """A synchronous run in ``out``: step t has G = group_sizes[t]; times from the SimPy
    engine under :data:`COST` (times of step t multiplied by ``slow[t]`` when given), or,
    for ``batching`` ``static`` / ``padded``, from :func:`sim.engine.static_batch.static_generate`
    (config ``engine_mode: static``, ``batch_padding`` accordingly)."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    engine = EngineConfig(n_workers=1, max_num_seqs=capacity, prefix_caching=False)
    rows, steps, t0 = [], [], 0.0
    for t, G in enumerate(group_sizes):
        P = rng.integers(4, 16, size=prompts)  # (prompts,) prompt tokens
        L = LENGTHS.sample_for_prompts(rng, P, G)  # (prompts, G)
        batch = (
            generate(L, P, COST, engine)
            if batching == "continuous"
            else static_generate(L, P, COST, capacity, padded=batching == "padded")
        )
        worker = getattr(batch, "worker", np.zeros(L.size, dtype=np.int64))
        k = (slow or {}).get(t, 1.0)
        n = prompts * G
        rows.append(
            trace.frame(
                {
                    "run_id": ["synthetic"] * n,
                    "step": [t] * n,
                    "prompt_id": np.repeat(t * prompts + np.arange(prompts), G),
                    "sample_idx": np.tile(np.arange(G), prompts),
                    "group_size": [G] * n,
                    "policy_version": [t] * n,
                    "learner_version": [t] * n,
                    "prompt_tokens": np.repeat(P, G),
                    "response_tokens": L.ravel(),
                    "finish_reason": finish_reasons(L.ravel(), 72),
                    "worker": worker,
                    "t_submit": np.full(n, t0),
                    "t_first_token": t0 + k * batch.t_first_token,
                    "t_finish": t0 + k * batch.t_finish,
                },
                "rollouts",
            )
        )
        span = float(k * batch.t_finish.max())
        steps.append(
            {
                "run_id": "synthetic",
                "step": t,
                "t_start": t0,
                "t_end": t0 + span + 0.01,
                "gen_time": span,
                "train_time": 0.01,
                "sync_time": 0.0,
                "lr": 1e-3,
                "reward_mean": None,
                "kl": None,
                "grad_norm": None,
                "grad_cosine": None,
                "controller_state": "{}",
            }
        )
        t0 += span + 0.01
    trace.write_parquet(pl.concat(rows), out / "rollouts.parquet", "rollouts")
    trace.write_parquet(
        pl.DataFrame(steps, schema=trace.STEP_SCHEMA), out / "steps.parquet", "steps"
    )
    cfg = {
        "run_id": "synthetic",
        "kind": "synthetic",
        "config": {
            "controller": "sagc:tau=2.0",
            "capacity": capacity,
            "max_response_length": 72,
            "engine_mode": "continuous" if batching == "continuous" else "static",
            "batch_padding": batching == "padded",
            "steps": len(group_sizes),
        },
    }
    (out / "config.json").write_text(json.dumps(cfg))
    return out
