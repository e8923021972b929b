"""``rolloutlab compare horizon``: the collapse-horizon law fitted per mechanism on half of
measured stability grids, predicting the other half (wiring only:
:mod:`analysis.collapse.horizon` fits, :mod:`analysis.collapse.horizon_plot` draws)."""

from __future__ import annotations

from pathlib import Path

import click

from rolloutlab.commands.options.common import OUT_DIR, claimed, collapse_split, fail
from rolloutlab.commands.options.terminal import echo_table
from rolloutlab.commands.options.types import NON_NEGATIVE_INT, STEPS, CommaList

SEED_LIST = CommaList(NON_NEGATIVE_INT)
"""``--fit-seeds``: distinct seeds >= 0, comma-separated."""


@click.command("horizon")
@click.option(
    "--real",
    "grids",
    required=True,
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="Stability grid (folder with stability.csv + config.json); repeat for one grid per "
    "mechanism (clip / IS setting, read from each config.json), or several per mechanism "
    "(e.g. its S 1,4 and its S 2,8 grid; no run twice).",
)
@collapse_split("seed")
@click.option(
    "--fit-seeds",
    type=SEED_LIST,
    default=None,
    help="With --held-out-by seed: the seeds the law is fitted on (comma-separated, >= 0); every "
    "other seed is held out [default: even seeds fit, odd held out].",
)
@click.option("--steps", type=STEPS, default=None, help="T per run [default: config.json].")
@click.option(
    "--bootstrap",
    type=click.IntRange(min=0, max=10_000),
    default=100,
    show_default=True,
    help="Bootstrap refits over seeds for the intervals (0: none).",
)
@click.option(
    "--law",
    type=click.Choice(["pooled", "separate", "drift", "two-part"]),
    default="pooled",
    show_default=True,
    help="One fit over all mechanisms sharing the horizon constants, each with its own "
    "per-step constant C; or one independent fit per mechanism; or drift: pooled plus a "
    "per-mechanism multiplier D of the horizon (drift) rate at S >= 2, with a "
    "likelihood-ratio test against pooled; or two-part: whether a run collapses from the "
    "pooled law on every run, when from the pooled law fitted to the collapsed runs alone.",
)
@OUT_DIR
def horizon(
    grids: tuple[Path, ...],
    split: str,
    held_out: float | None,
    fit_seeds: list[int] | None,
    steps,
    bootstrap: int,
    law: str,
    out_dir: Path,
) -> None:
    """Predict collapse steps: fit the horizon law on half the runs, predict the rest.

    Writes OUT/horizon_points.csv (held-out runs: measured, predicted median and its
    interval, each naive rule's probability and step, seen/unseen cell),
    OUT/horizon_summary.json (agreement, MdAPE, Brier score beside the naive rules and the
    run-to-run floor, seed floor, fitted exponents with intervals against PAPERS.md §2), OUT/horizon.png, OUT/config.json and, when the
    grids keep their run folders, OUT/mechanism_metrics.csv (per run: KL to the behaviour
    policy, entropy, grad norm, clip fraction, engine-learner gap up to the collapse).
    """
    from rolloutlab.analysis.collapse.compare import GridError
    from rolloutlab.analysis.collapse.horizon import horizon_compare, read_grids
    from rolloutlab.analysis.collapse.horizon import split as split_rows

    if fit_seeds is not None and split != "seed":
        raise click.BadParameter("needs --held-out-by seed", param_hint="--fit-seeds")
    if held_out is not None and split == "seed":
        raise click.BadParameter("needs --held-out-by lr or S", param_hint="--held-out-value")
    try:
        df = read_grids(list(grids), steps)
        seeds = None if fit_seeds is None else tuple(fit_seeds)
        for (_,), rows in df.group_by("mechanism"):  # a split that cannot be made: before --out
            split_rows(rows, split, seeds, held_out)
    except GridError as exc:
        fail(exc)
    with claimed(out_dir, "compare-horizon"):  # (before the fits: an unwritable --out at once)
        click.echo(  # the fits and refits take a minute or two: say so first
            f"compare horizon: fitting {df.height} runs, {bootstrap} bootstrap refits ...",
            err=True,
        )
        try:
            summary = horizon_compare(
                list(grids), df, out_dir, split, bootstrap, law, seeds, held_out
            )
        except GridError as exc:
            fail(exc)
    _echo_horizon(summary)
    click.echo(f"-> {out_dir}")


def _echo_horizon(summary: dict) -> None:
    """Print the held-out agreement and MdAPE beside the seed floor and ceiling (pooled,
    each synchronous run once, per mechanism with its fitted exponents), the law's scores
    beside the naive rules, and the drift test where the drift law was fitted."""
    from rolloutlab.analysis.collapse.baselines import score_table, verdict

    h = summary["held_out"]
    click.echo(
        f"held-out runs: {h['points']}, classification agreement {h['agreement']:.3f}, "
        f"step MdAPE over the {h['both_collapsed']} runs collapsed on both sides "
        f"{h['t_collapse_mdape']:.3f}"
        + (
            f" (seed floor: agreement {summary['seed_floor']['agreement']:.3f}, MdAPE "
            f"{summary['seed_floor']['mdape']:.3f})"
            if "seed_floor" in summary
            else ""
        )
    )
    click.echo(
        f"classification ceiling (best any per-cell predictor can do on these held-out runs): "
        f"{summary['class_ceiling']:.3f}"
    )
    d = summary["held_out_distinct"]
    click.echo(
        f"counting each S <= 1 run once across mechanisms: {d['points']} runs, agreement "
        f"{d['agreement']:.3f}, step MdAPE over runs collapsed on both sides "
        f"{d['t_collapse_mdape']:.3f} ({d['both_collapsed']} runs)"
        + (
            f" (seed floor: {summary['seed_floor_distinct']['agreement']:.3f}, "
            f"{summary['seed_floor_distinct']['mdape']:.3f}; ceiling "
            f"{summary['class_ceiling_distinct']:.3f})"
            if "seed_floor_distinct" in summary
            else ""
        )
    )
    click.echo(
        f"beside the naive rules and the floor on the same {summary['scores']['runs']} held-out "
        f"runs ({summary['baselines']['cells']} cells; mdape_all_collapsed: every collapsed "
        "held-out run, a prediction beyond T counted as T + 1; mdape_both_collapsed: the runs "
        "collapsed on both sides, each predictor's own):"
    )
    echo_table(score_table("horizon law", summary["scores"], summary["baselines"]))
    click.echo(
        "horizon law against the best naive rule: "
        + verdict(summary["scores"], summary["baselines"]["rules"])
    )
    for mech, m in summary["mechanisms"].items():
        fitted = m["law_all"]
        floor = m["seed_floor"]
        click.echo(
            f"{mech}: agreement {m['held_out']['agreement']:.3f}, step MdAPE over runs "
            f"collapsed on both sides {m['held_out']['t_collapse_mdape']:.3f}"
            + (
                f" (seed floor {floor['agreement']:.3f}, {floor['mdape']:.3f})"
                if floor is not None
                else ""
            )
            + f"; eta exponent a = {fitted['a']['value']:.2f} [{fitted['a']['lo']:.2f}, "
            f"{fitted['a']['hi']:.2f}] (paper 1), S exponent c = "
            + (
                "1 (held: one stale S)"
                if fitted["c"].get("fixed")
                else f"{fitted['c']['value']:.2f} [{fitted['c']['lo']:.2f}, {fitted['c']['hi']:.2f}] (paper 1)"
            )
        )
    if "drift_test" in summary:
        d = summary["drift_test"]
        click.echo(
            f"drift law vs pooled (all runs): likelihood ratio {d['statistic']:.2f} on "
            f"{d['dof']} dof, p = {d['p_value']:.3g}, AIC difference {d['aic_difference']:+.2f}; "
            "D = " + ", ".join(f"{m} {v:.2f}" for m, v in d["drift"].items())
        )
