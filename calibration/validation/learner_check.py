"""Out-of-run check of the learner roofline on verl's FSDP GRPO logs (8 x H20).

Fits the MFUs on one run (:func:`calibration.fits.learner_fit.fit_efficiency`) and
predicts the median ``timing_s/old_log_prob``, ``timing_s/ref`` and
``timing_s/update_actor`` of the others from their token counts, model and layout
(FSDP on 8 GPUs). Only the FSDP runs: the Megatron runs' TP/PP layout is not logged.

Usage: python -m rolloutlab.calibration.validation.learner_check DATA_DIR [FIT_RUN]
(``DATA_DIR``: the ``raw/`` folder of ``/work/shared/data/verl_async_reward_grpo_tb``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
from rolloutlab.calibration.fits.learner_fit import fit_efficiency, predict
from rolloutlab.calibration.readers.verl_tb import read_run
from rolloutlab.sim.models.hardware import get_gpu, get_model
from rolloutlab.sim.models.learner_cost import Layout

RUNS = {
    "q3b_fsdp_base": "qwen2.5-3b",
    "q3b_fsdp_off_ppl": "qwen2.5-3b",
    "q7b_fsdp_off_ppl": "qwen2.5-7b",
}
"""FSDP runs of the recipe -> model (Qwen2-7B has Qwen2.5-7B's shapes)."""


def check(data_dir: Path, fit_run: str) -> pl.DataFrame:
    """Rows ``fit, run, phase, measured_s, predicted_s, error`` for every FSDP run
    predicted with the MFUs fitted on ``fit_run``. Raises VerlLogError on a bad log."""
    gpu, lay = get_gpu("h20"), Layout(8)
    tables = {r: read_run(data_dir / r) for r in RUNS}
    eff = fit_efficiency(tables[fit_run], get_model(RUNS[fit_run]), gpu, lay, source=fit_run)
    out = [
        predict(t, get_model(RUNS[r]), gpu, lay, eff).with_columns(
            pl.lit(fit_run).alias("fit"), pl.lit(r).alias("run")
        )
        for r, t in tables.items()
    ]
    print(f"fit on {fit_run}: forward_mfu={eff.forward_mfu:.3f} train_mfu={eff.train_mfu:.3f}")
    return pl.concat(out).select("fit", "run", "phase", "measured_s", "predicted_s", "error")


if __name__ == "__main__":
    table = check(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "q3b_fsdp_base")
    with pl.Config(tbl_rows=30, float_precision=3, tbl_width_chars=120):
        print(table)
