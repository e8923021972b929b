"""Make a run's ``samples.parquet`` (the bundled per-sample layout of this folder) from
the ``rollouts.jsonl`` of ``rolloutlab real sync``: one row per sample, ``step``,
``prompt_id``, ``sample_idx``, ``prompt_tokens``, ``response_length`` (the trace's
``response_tokens``), ``finish_reason``, ``score`` (the trace's ``correct``); small
integer types, rows sorted by step, prompt, sample; zstd level 22. Aborted rollouts are
left out.

    python tests/data/groups/make_samples.py RUN_DIR OUT_DIR
"""

import shutil
import sys
from pathlib import Path

import polars as pl


def main(run: Path, out: Path) -> None:
    df = (
        pl.read_ndjson(run / "rollouts.jsonl")
        .filter(pl.col("finish_reason") != "abort")
        .select(
            pl.col("step").cast(pl.Int16),
            pl.col("prompt_id").cast(pl.Int32),
            pl.col("sample_idx").cast(pl.Int8),
            pl.col("prompt_tokens").cast(pl.Int16),
            pl.col("response_tokens").cast(pl.Int16).alias("response_length"),
            pl.col("finish_reason").cast(pl.Categorical),
            pl.col("correct").cast(pl.Boolean).alias("score"),
        )
        .sort("step", "prompt_id", "sample_idx")
    )
    out.mkdir(parents=True, exist_ok=False)
    df.write_parquet(out / "samples.parquet", compression="zstd", compression_level=22)
    shutil.copy(run / "config.json", out / "config.json")
    print(f"{out}: {df.height} rows, {(df['finish_reason'] == 'length').sum()} at the cap")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
