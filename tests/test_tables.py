"""One table printer for every command: polars' box style, no column types, strings in
full, and legible on a 100-column terminal (a wide table is cut into column blocks, each
repeating the row keys)."""

from __future__ import annotations

import polars as pl

from rolloutlab.commands.options.terminal import echo_table


def _summary() -> pl.DataFrame:
    cols = ["wall_clock_s", "gen_time_s", "slot_idle_frac", "straggler_rate", "mean_G",
            "rollouts", "tokens_per_s", "informative_frac", "final_reward", "time_to_target_s",
            "gen_rounds_mean", "dynamic_sampling_abort_frac"]  # fmt: skip
    return pl.DataFrame(
        {
            "controller": ["static:4", "sagc:tau=15,delta=0.2,G_min=8"],
            "pipeline": ["sync", "bounded:4"],
            **{c: [1234.5678 * (i + 1), 0.25 * i] for i, c in enumerate(cols)},
        }
    )


def test_a_wide_table_fits_100_columns_in_blocks_that_repeat_the_row_keys(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    df = _summary()
    echo_table(df)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(x) for x in lines) <= 100
    for c in df.columns:
        assert c in out
    blocks = sum("controller" in x for x in lines)
    assert blocks >= 2 and blocks == sum("pipeline" in x and "│" in x for x in lines)
    assert out.count("sagc:tau=15,delta=0.2,G_min=8") == blocks  # strings in full, each block
    assert "┆ f64" not in out and "│ str" not in out and "shape:" not in out  # no types


def test_a_narrow_table_is_one_block_in_the_same_style(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    echo_table(_summary().select("controller", "pipeline", "mean_G"), precision=2)
    out = capsys.readouterr().out
    assert out.count("controller") == 1 and "┆" in out and "┆ f64" not in out
    assert "6172.84" in out  # precision 2
