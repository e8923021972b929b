"""Out-of-run check of the learner roofline on verl's FSDP GRPO logs (8 x H20).

Fits the MFUs on one run (:func:`calibration.fits.learner_fit.fit_efficiency`) and
predicts the median ``timing_s/old_log_prob``, ``timing_s/ref`` and
``timing_s/update_actor`` of the others from their token counts, model and layout
(FSDP on 8 GPUs). Only the FSDP runs: the Megatron runs' TP/PP layout is not logged.

Beside the roofline, the naive rules calibrated on the same run: ``constant`` (the fit
run's median phase time) and ``per_token`` (the fit run's median phase time per token of
``perf/total_num_tokens``, times the predicted run's median tokens: time proportional to
tokens, whatever the model). Errors are ``predicted / measured - 1``.

Usage: python -m rolloutlab.calibration.validation.learner_check DATA_DIR [FIT_RUN]
(``DATA_DIR``: the ``raw/`` folder of ``/work/shared/data/verl_async_reward_grpo_tb``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
from rolloutlab.calibration.fits.learner_fit import TOKENS, fit_efficiency, predict
from rolloutlab.calibration.readers.verl_tb import read_run
from rolloutlab.sim.models.hardware import get_gpu, get_model
from rolloutlab.sim.models.learner_cost import Layout

RUNS = {
    "q3b_fsdp_base": "qwen2.5-3b",
    "q3b_fsdp_off_ppl": "qwen2.5-3b",
    "q7b_fsdp_off_ppl": "qwen2.5-7b",
}
"""FSDP runs of the recipe -> model (Qwen2-7B has Qwen2.5-7B's shapes)."""


def check(data_dir: Path, fit_run: str, skip: int = 2) -> pl.DataFrame:
    """Rows ``fit, run, phase, measured_s, predicted_s, error, constant_error,
    per_token_error`` for every FSDP run predicted with the MFUs fitted on ``fit_run``
    (medians over the steps from ``skip``, as :func:`calibration.fits.learner_fit.predict`).
    Raises VerlLogError on a bad log."""
    gpu, lay = get_gpu("h20"), Layout(8)
    tables = {r: read_run(data_dir / r) for r in RUNS}
    eff = fit_efficiency(tables[fit_run], get_model(RUNS[fit_run]), gpu, lay, source=fit_run)
    tokens = {r: median_tokens(t, skip) for r, t in tables.items()}
    out = [
        predict(t, get_model(RUNS[r]), gpu, lay, eff, skip=skip).with_columns(
            pl.lit(fit_run).alias("fit"), pl.lit(r).alias("run"), pl.lit(tokens[r]).alias("tokens")
        )
        for r, t in tables.items()
    ]
    print(f"fit on {fit_run}: forward_mfu={eff.forward_mfu:.3f} train_mfu={eff.train_mfu:.3f}")
    return naive_errors(pl.concat(out), fit_run).select(
        "fit", "run", "phase", "measured_s", "predicted_s", "error", "constant_error",
        "per_token_error",
    )  # fmt: skip


def median_tokens(table: pl.DataFrame, skip: int = 2) -> float:
    """Median ``perf/total_num_tokens`` over the steps from ``skip`` after the first."""
    rows = table.filter(pl.col("step") >= table["step"].min() + skip)
    return float(rows[TOKENS].median())


def naive_errors(rows: pl.DataFrame, fit_run: str) -> pl.DataFrame:
    """``rows`` (columns ``run, phase, measured_s, tokens``; one row per run and phase)
    with ``constant_error`` and ``per_token_error``: the fit run's phase time, as it is
    and scaled by the run's tokens over the fit run's, against each run's measured time.
    Raises ValueError when ``fit_run`` has no row."""
    fit = rows.filter(pl.col("run") == fit_run).select(
        "phase", pl.col("measured_s").alias("fit_s"), pl.col("tokens").alias("fit_tokens")
    )
    if fit.height == 0:
        raise ValueError(f"no rows of the fit run {fit_run!r}")
    return rows.join(fit, on="phase", how="left", maintain_order="left").with_columns(
        (pl.col("fit_s") / pl.col("measured_s") - 1).alias("constant_error"),
        (
            pl.col("fit_s") * pl.col("tokens") / pl.col("fit_tokens") / pl.col("measured_s") - 1
        ).alias("per_token_error"),
    )


if __name__ == "__main__":
    table = check(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "q3b_fsdp_base")
    with pl.Config(tbl_rows=30, float_precision=3, tbl_width_chars=160, tbl_cols=10):
        print(table)
