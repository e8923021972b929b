"""``rolloutlab stability``: sweep the collapse model over S x lr x seed (PAPERS.md §2)."""

from __future__ import annotations

import functools
import time
from dataclasses import asdict, replace
from pathlib import Path

import click
import polars as pl

from rolloutlab.commands.grid.options import (
    describe_executor,
    finish_grid,
    grid_options,
    prepare_grid,
    run_points,
    start_grid,
)
from rolloutlab.commands.options.common import claim, out_option, renamed_option
from rolloutlab.commands.options.terminal import echo_table
from rolloutlab.commands.options.types import (
    NON_NEGATIVE_INT,
    POSITIVE,
    PROMPTS,
    SEED_COUNT,
    STEPS,
    CommaList,
)
from rolloutlab.sim.models.horizon import fit_to_dict
from rolloutlab.sim.models.staleness import StalenessParams
from rolloutlab.sim.scenario.provenance import write_config
from rolloutlab.sim.studies.stability import default_lrs, run_point, summarize
from rolloutlab.sim.trace import strict_json


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
    type=STEPS,
    help="Learner steps T per run (>= 1).",
)
@click.option(
    "--seeds", default=4, show_default=True, type=SEED_COUNT, help="Seeds per (S, lr): 0..N-1."
)
@click.option(
    "--prompts",
    "batch",
    default=None,
    type=PROMPTS,
    help=f"Prompt batch B per learner step (>= 1) [default: {StalenessParams().batch_prompts}].",
)
@renamed_option("--batch", "--prompts", "batch", type=PROMPTS)
@out_option("Output directory (new, or an earlier `stability` output).", dest="out")
@grid_options
def stability(
    S_values: list[int],
    lrs: list[float] | None,
    T: int,
    seeds: int,
    batch: int | None,
    out: Path,
    **opts,
) -> None:
    """Collapse phase diagram of asynchronous GRPO at staleness S and learning rate lr.

    Writes DIR/stability.csv, DIR/phase_diagram.png and DIR/config.json, and (when the
    grid has two S, two lr and a collapse) the fitted horizon law DIR/horizon.json and its
    predicted collapse steps with seed intervals DIR/horizon.csv (docs/staleness.md).
    """
    lrs = default_lrs().tolist() if lrs is None else lrs
    params = StalenessParams() if batch is None else replace(StalenessParams(), batch_prompts=batch)
    config = {
        "command": "stability",
        "params": asdict(params),
        "S": S_values,
        "lr": lrs,
        "steps": T,
        "seeds": seeds,
        "mode": "sync-interval",
    }
    points = [{"S": S} for S in S_values]  # a point: one S, its lr x seed block vectorised
    out_dir = Path(out)
    executor, store = prepare_grid(opts, out_dir, "stability", config, points)
    claim(out_dir, "stability")
    start_grid(out_dir, config)
    t0 = time.perf_counter()
    fn = functools.partial(run_point, params=params, lrs=lrs, T=T, seeds=seeds)
    run_points(executor, store, fn, opts["resume"], "stability")
    df = finish_grid(store)
    runtime_s = time.perf_counter() - t0
    df.write_csv(out_dir / "stability.csv")
    ok = df.filter(pl.col("status") == "ok")
    from rolloutlab.analysis.collapse.stability_plots import (
        plot_phase_diagram,  # seaborn: not for --help
    )

    plot_phase_diagram(ok, params, T, out_dir / "phase_diagram.png")
    write_config(
        out_dir / "config.json", {**config, "runtime_s": runtime_s, **describe_executor(opts)}
    )
    echo_table(summarize(ok), precision=4)
    from rolloutlab.analysis.collapse.horizon import grid_horizon

    fit, table, note = grid_horizon(ok, T)
    if fit is not None and table is not None:  # (both None where no law can be fitted)
        strict_json.write_json(out_dir / "horizon.json", fit_to_dict(fit))
        table.write_csv(out_dir / "horizon.csv")
        click.echo(
            "predicted collapse step near the boundary (median t_predicted, 16-84 % seed "
            "interval t_lo..t_hi); every (S, lr) in horizon.csv:"
        )
        shown = table.filter(
            pl.col("p_collapse").is_between(0.02, 0.98)
            | pl.col("collapsed_share").is_between(0.01, 0.99)
        )
        echo_table(shown.drop("runs"), precision=3)
    click.echo(note)
    click.echo(f"{df.height} runs in {runtime_s:.2f} s -> {out_dir}")
