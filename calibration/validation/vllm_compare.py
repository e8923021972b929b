"""Simulated vs measured makespan of real steps: the check of a measured cost calibration.

For every step of a real run's rollout trace, the step's own response lengths
``(B, G)`` and prompt lengths ``(B,)`` are replayed through the simulator's engine
(:func:`sim.engine.core.generate`) with a calibration's cost model and engine config; the
predicted makespan ``gen_overhead_s + max t_finish`` is set beside the measured one
(:func:`sim.trace.metrics.step_metrics`: ``max t_finish - min t_submit``). Only the timing
model is under test: lengths are the measured ones.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from rolloutlab.sim.engine.core import EngineConfig, generate
from rolloutlab.sim.models.cost import LinearCost
from rolloutlab.sim.trace.metrics import consumed, step_metrics


def step_lengths(df: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``(B, G)`` response lengths and ``(B,)`` prompt lengths of one step's rollouts
    (rows ordered by prompt id then sample index). Raises: ValueError if groups differ in size."""
    df = df.sort(["prompt_id", "sample_idx"])
    sizes = df.group_by("prompt_id").len()["len"].unique().to_list()
    if len(sizes) != 1:
        raise ValueError(f"step {df['step'][0]}: groups of different sizes {sorted(sizes)}")
    G = int(sizes[0])
    lengths = df["response_tokens"].to_numpy().reshape(-1, G)  # (B, G)
    prompts = df["prompt_tokens"].to_numpy().reshape(-1, G)[:, 0]  # (B,)
    return lengths, prompts


def sim_vs_measured(rollouts: pl.DataFrame, cost: LinearCost, engine: EngineConfig) -> pl.DataFrame:
    """One row per step: ``run_id, step, group_size, n_rollouts, measured_makespan_s,
    predicted_makespan_s, rel_err`` (``predicted / measured - 1``)."""
    rows = []
    for (run_id,), run in consumed(rollouts).group_by(["run_id"], maintain_order=True):
        measured = {
            int(r["step"]): r["makespan_s"] for r in step_metrics(run).iter_rows(named=True)
        }
        for (step,), df in run.sort("step").group_by(["step"], maintain_order=True):
            lengths, prompts = step_lengths(df)
            batch = generate(lengths, prompts, cost, engine)
            pred = cost.gen_overhead_s + float(np.nanmax(batch.t_finish))
            meas = float(measured[int(step)])
            rows.append(
                {
                    "run_id": run_id,
                    "step": int(step),
                    "group_size": int(lengths.shape[1]),
                    "n_rollouts": int(lengths.size),
                    "measured_makespan_s": meas,
                    "predicted_makespan_s": pred,
                    "rel_err": pred / meas - 1.0 if meas > 0 else float("nan"),
                }
            )
    return pl.DataFrame(rows)


def summary_markdown(table: pl.DataFrame, label: str = "") -> str:
    """A markdown table per run: steps, mean measured and predicted makespan, MAPE, and
    the rows of the first steps."""
    lines = [
        f"### Simulated vs measured makespan{(' — ' + label) if label else ''}",
        "",
        "| run | steps | measured mean (s) | predicted mean (s) | MAPE | max abs rel err |",
        "|---|---|---|---|---|---|",
    ]
    for (run_id,), df in table.group_by(["run_id"], maintain_order=True):
        err = df["rel_err"].abs()
        lines.append(
            f"| {run_id} | {df.height} | {df['measured_makespan_s'].mean():.4f} | "
            f"{df['predicted_makespan_s'].mean():.4f} | {err.mean():.3f} | {err.max():.3f} |"
        )
    lines += [
        "",
        "| run | step | G | rollouts | measured (s) | predicted (s) | rel err |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table.iter_rows(named=True):
        lines.append(
            f"| {r['run_id']} | {r['step']} | {r['group_size']} | {r['n_rollouts']} | "
            f"{r['measured_makespan_s']:.4f} | {r['predicted_makespan_s']:.4f} | {r['rel_err']:+.3f} |"
        )
    return "\n".join(lines) + "\n"
