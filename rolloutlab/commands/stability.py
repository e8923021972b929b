"""``rolloutlab stability``: sweep the collapse model over S x lr x seed (PAPERS.md §2)."""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path

import click

from rolloutlab.analysis.stability_plots import plot_phase_diagram
from rolloutlab.commands.common import claimed, echo_table
from rolloutlab.commands.types import (
    NON_NEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    SEED_COUNT,
    CommaList,
)
from rolloutlab.sim.provenance import write_config
from rolloutlab.sim.stability import default_lrs, run_grid, summarize
from rolloutlab.sim.staleness import StalenessParams


@click.command()
@click.option(
    "--S",
    "S_values",
    default="1,2,4,8,16,32",
    show_default=True,
    type=CommaList(NON_NEGATIVE_INT),
    help="Sync intervals S (learner steps per weight sync): distinct integers >= 0, "
    "comma-separated; 0 = synchronous.",
)
@click.option(
    "--lr",
    "lrs",
    default=None,
    type=CommaList(POSITIVE),
    help="Learning rates: distinct finite numbers > 0, comma-separated "
    "[default: 21 log-spaced in 1e-3..0.3].",
)
@click.option(
    "--steps",
    "T",
    default=1000,
    show_default=True,
    type=POSITIVE_INT,
    help="Learner steps T per run (>= 1).",
)
@click.option(
    "--seeds", default=4, show_default=True, type=SEED_COUNT, help="Seeds per (S, lr): 0..N-1."
)
@click.option(
    "--prompts",
    "--batch",
    "batch",
    default=None,
    type=POSITIVE_INT,
    help=f"Prompt batch B per learner step (>= 1) [default: {StalenessParams().batch_prompts}]"
    " (--batch: old name).",
)
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Output directory (new, or an earlier `stability` output).",
)
def stability(
    S_values: list[int], lrs: list[float] | None, T: int, seeds: int, batch: int | None, out: Path
) -> None:
    """Collapse phase diagram of asynchronous GRPO at staleness S and learning rate lr.

    Writes DIR/stability.csv, DIR/phase_diagram.png and DIR/config.json.
    """
    lrs = default_lrs().tolist() if lrs is None else lrs
    params = StalenessParams() if batch is None else replace(StalenessParams(), batch_prompts=batch)
    with claimed(out, "stability") as out_dir:
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
