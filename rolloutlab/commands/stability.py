"""``rolloutlab stability``: sweep the collapse model over S x lr x seed (PAPERS.md §2)."""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path

import click
import numpy as np

from rolloutlab.analysis.stability_plots import plot_phase_diagram
from rolloutlab.commands.common import claim, echo_table, parse_list
from rolloutlab.sim.provenance import write_config
from rolloutlab.sim.stability import default_lrs, run_grid, summarize
from rolloutlab.sim.staleness import StalenessParams


@click.command()
@click.option(
    "--S",
    "S_text",
    default="1,2,4,8,16,32",
    show_default=True,
    help="Sync intervals S (learner steps per weight sync), comma-separated; 0 = synchronous.",
)
@click.option(
    "--lr",
    "lr_text",
    default=None,
    help="Learning rates, comma-separated [default: 21 log-spaced in 1e-3..0.3].",
)
@click.option(
    "--steps", "T", default=1000, show_default=True, type=int, help="Learner steps T per run."
)
@click.option("--seeds", default=4, show_default=True, type=int, help="Seeds per (S, lr).")
@click.option(
    "--batch",
    "batch",
    default=None,
    type=int,
    help=f"Prompts per learner step B [default: {StalenessParams().batch_prompts}].",
)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Output directory.",
)
def stability(
    S_text: str, lr_text: str | None, T: int, seeds: int, batch: int | None, out_dir: Path
) -> None:
    """Collapse phase diagram of asynchronous GRPO at staleness S and learning rate lr.

    Writes DIR/stability.csv, DIR/phase_diagram.png and DIR/config.json.
    """
    S_values = parse_list("--S", S_text, int, lambda v: v >= 0, "integers >= 0")
    lrs = (
        default_lrs().tolist()
        if lr_text is None
        else parse_list("--lr", lr_text, float, lambda v: v > 0 and np.isfinite(v), "numbers > 0")
    )
    for name, value in (("--steps", T), ("--seeds", seeds), ("--batch", batch)):
        if value is not None and value < 1:
            raise click.BadParameter(f"expected an integer >= 1, got {value}", param_hint=name)
    params = StalenessParams() if batch is None else replace(StalenessParams(), batch_prompts=batch)
    claim(out_dir, "stability")
    t0 = time.perf_counter()
    big = (
        len(S_values) * len(lrs) * seeds * T > 5_000_000
    )  # why: the bar only when the grid takes seconds
    df = run_grid(params, S_values, lrs, T, seeds, progress=big)
    runtime_s = time.perf_counter() - t0
    df.write_csv(out_dir / "stability.csv")
    plot_phase_diagram(df, params, T, out_dir / "phase_diagram.png")
    config = {
        "command": "stability",
        "params": asdict(params),
        "S": S_values,
        "lr": lrs,
        "steps": T,
        "seeds": seeds,
        "mode": "sync-interval",
        "runtime_s": runtime_s,
    }
    write_config(out_dir / "config.json", config)
    echo_table(summarize(df), cols=None, precision=4, dtypes=True, width=None)
    click.echo(f"{df.height} runs in {runtime_s:.2f} s -> {out_dir}")
