"""Smoke tests of ``rolloutlab stability`` with a tiny grid."""

import json

import polars as pl
from click.testing import CliRunner

from rolloutlab.cli import main


def test_stability_writes_csv_figure_and_config(tmp_path):
    res = CliRunner().invoke(
        main,
        [
            "stability",
            "--S",
            "1,8",
            "--lr",
            "0.001,0.05,0.2",
            "--steps",
            "50",
            "--seeds",
            "2",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    df = pl.read_csv(tmp_path / "stability.csv")
    assert df.columns[:8] == "S lr seed collapsed t_collapse M_collapse regime cos_sim_mean".split()
    assert df.height == 2 * 3 * 2
    assert (tmp_path / "phase_diagram.png").stat().st_size > 1000
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["steps"] == 50 and "numpy" in cfg["versions"] and cfg["params"]["R_batch"] > 0


def test_stability_rejects_bad_options(tmp_path):
    for args, option in (
        (["--S", "1,-2"], "--S"),
        (["--lr", "0.1,0"], "--lr"),
        (["--lr", ","], "--lr"),
        (["--steps", "0"], "--steps"),
    ):
        res = CliRunner().invoke(main, ["stability", *args, "--out", str(tmp_path)])
        assert res.exit_code == 2 and option in res.output, res.output
