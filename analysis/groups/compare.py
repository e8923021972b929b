"""The ``compare groups`` studies, from grouped per-sample files to an output folder.

- :func:`groups_study`: fit on a run's first K steps (or all of them), predict P(max/median
  > tau) per G on its later steps or on another run, with the run-to-run target when
  several runs of the configuration are given; :func:`write_groups_outputs` writes
  ``validation_groups.csv``, ``validation_groups.png`` and ``config.json``.
- :func:`forecast_study`: forecast the steps after K beside the naive rules, the other
  runs giving the floor (:func:`calibration.validation.forecast.forecast_runs`).

Both read every file and check every length against the cap before any output exists;
bad input is a ValueError (or OSError) naming the file, line and field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl
from rolloutlab.calibration.readers.grouped import FieldNames, GroupedTrace, read_grouped
from rolloutlab.calibration.validation.forecast import (
    ForecastConfig,
    cell_errors,
    forecast_runs,
    makespan_errors,
    meets_target,
)
from rolloutlab.calibration.validation.groups import ValidationConfig, validate_groups
from rolloutlab.calibration.validation.run_spread import ERROR_TARGET, with_target
from rolloutlab.calibration.validation.transfer import NAIVE_SUFFIX, TRANSFERS
from rolloutlab.sim.scenario.provenance import write_config

COMMAND = "validate groups"
"""The ``command`` of ``config.json``: an earlier output folder of ``compare groups``
(and of its old spelling) carries it, so a rerun may replace it."""


@dataclass(frozen=True)
class GroupsStudy:
    """What :func:`groups_study` measured and predicted."""

    table: pl.DataFrame
    """One row per (model, tau, G): the columns of
    :data:`calibration.validation.groups.COLUMNS` (and ``target``/``meets`` with several runs)."""
    trace: GroupedTrace
    """The fitted run (FILE...)."""
    held_out: GroupedTrace | None
    """The held-out run (``--held-out``), None when the later steps of ``trace`` are measured."""
    files: tuple[str, ...]
    held_out_files: tuple[str, ...]
    cfg: ValidationConfig

    @property
    def where(self) -> str:
        """What was measured, for the figure's title."""
        if self.held_out_files:
            return f"another run ({', '.join(self.held_out_files)}), steps >= {self.cfg.from_step}"
        return f"held-out steps of the same run (fit on {self.cfg.fit_steps})"

    def summary(self) -> pl.DataFrame:
        """Per model and tau: the largest |error| over G and the |error| at the logged G."""
        return self.table.group_by("model", "tau", maintain_order=True).agg(
            pl.col("abs_error").max().alias("max_abs_error"),
            pl.col("abs_error")
            .filter(pl.col("G") == pl.col("G").max())
            .first()
            .alias("at_logged_G"),
        )

    def target_line(self) -> str | None:
        """One line per model: cells meeting max(0.10, floor + 2 SE) and the worst miss
        (None without the run-to-run target)."""
        if "meets" not in self.table.columns:
            return None
        parts = []
        scored = self.table.filter(pl.col("meets").is_not_null())
        for (model,), t in scored.group_by("model"):
            miss = (t["abs_error"] - t["target"]).max()
            parts.append(
                f"{model}: {int(t['meets'].sum())} of {t.height} cells within max(0.10, "
                "floor + 2 SE)" + (f", worst by {miss:.3f}" if miss > 0 else "")
            )
        return "target: " + "; ".join(sorted(parts))

    def naive_lines(self) -> list[str]:
        """With ``--transfer``: the fitted law against its same-information naive rule
        (:func:`against_rho0`), one line per kind."""
        return [against_rho0(self.table, kind) for kind in TRANSFERS if _has(self.table, kind)]


TIE = 0.005
"""|error| differences below this count as a tie in :func:`against_rho0` (a few times
the simulation's standard error of a predicted P at 300 simulated steps per step)."""


def _has(table: pl.DataFrame, kind: str) -> bool:
    return f"transfer_{kind}{NAIVE_SUFFIX}" in table["model"].unique().to_list()


def against_rho0(table: pl.DataFrame, kind: str) -> str:
    """One line: ``transfer_<kind>`` (the fitted ``rho``) against ``transfer_<kind>_rho0``
    (``rho`` = 0 on the same marginal) over their common (tau, G) cells: the largest
    |error| of each, the cells within :data:`ERROR_TARGET` of each, and the cells where the
    law's |error| is lower / higher than the rule's by more than :data:`TIE` (else tied).
    The law beats the rule when its largest |error| is lower and it has at least as many
    cells within the target (docs/per_sample.md, the plan fixed before the runs)."""
    law, naive = f"transfer_{kind}", f"transfer_{kind}{NAIVE_SUFFIX}"
    cells = (
        table.filter(pl.col("model") == law)
        .select("tau", "G", "abs_error")
        .join(
            table.filter(pl.col("model") == naive).select("tau", "G", naive=pl.col("abs_error")),
            on=["tau", "G"],
        )
    )
    e, n = cells["abs_error"], cells["naive"]
    worst, worst_naive = float(e.max()), float(n.max())
    ok, ok_naive = int((e <= ERROR_TARGET).sum()), int((n <= ERROR_TARGET).sum())
    lower, higher = int((e < n - TIE).sum()), int((e > n + TIE).sum())
    beats = worst < worst_naive and ok >= ok_naive
    return (
        f"{law} against the same-information rule {naive} (rho = 0): largest |error| "
        f"{worst:.3f} against {worst_naive:.3f}; cells within {ERROR_TARGET:.2f}: {ok} "
        f"against {ok_naive} of {cells.height}; |error| lower in {lower}, higher in {higher}, "
        f"within {TIE} in {cells.height - lower - higher} cells: "
        + ("beats it" if beats else "does not beat it")
    )


def groups_study(
    files: Sequence[str],
    held_out: Sequence[str],
    names: FieldNames,
    tokenizer: str | None,
    cfg: ValidationConfig,
) -> GroupsStudy:
    """Fit ``files`` (one run) as ``cfg`` says and predict its later steps, or the run
    ``held_out`` when given; with ``held_out`` and two or more ``files`` (runs of one
    configuration), each cell also gets the run-to-run target
    (:func:`calibration.validation.run_spread.with_target`).

    Raises ValueError (file, line, field, or an option the data cannot meet) or OSError.
    """
    trace = read_grouped(list(files), names, tokenizer)
    other = read_grouped(list(held_out), names, tokenizer) if held_out else None
    for t in (trace, other):
        if t is not None:
            t.check_cap(cfg.cap)
    table = validate_groups(trace, cfg, other)
    if other is not None and len(files) >= 2:  # several runs of one configuration
        runs = [read_grouped([f], names, tokenizer) for f in files]
        table = with_target(table, runs, other, cfg.from_step, cfg.draws, cfg.seed)
    return GroupsStudy(table, trace, other, tuple(files), tuple(held_out), cfg)


def write_groups_outputs(study: GroupsStudy, out_dir: Path) -> None:
    """Write ``out_dir``/validation_groups.csv, validation_groups.png (measured and
    predicted P(straggler) against G) and config.json (:data:`COMMAND`)."""
    table = study.table
    table.write_csv(out_dir / "validation_groups.csv", float_precision=4)
    from rolloutlab.analysis.figures.groups_plot import straggler_vs_g_figure  # seaborn

    straggler_vs_g_figure(
        table, out_dir / "validation_groups.png", f"{study.where}, B={table['B'][0]}"
    )
    write_config(
        out_dir / "config.json",
        {
            "command": COMMAND,
            "files": list(study.files),
            "held_out": list(study.held_out_files),
            "length_unit": study.trace.length_unit,
            "config": study.cfg.__dict__,
        },
    )


@dataclass(frozen=True)
class ForecastStudy:
    """What :func:`forecast_study` forecast, and its scores."""

    cells: pl.DataFrame
    """``forecast_cells.csv``: one row per (step, tau, G) and rule."""
    makespan: pl.DataFrame
    """``forecast_makespan.csv``: one row per forecast step."""
    length_unit: str
    """Of the first run: ``tokens`` or ``characters``."""
    errors: dict[str, float]
    """Mean |error| of P(max/median > tau) per rule (and ``floor``) over the scored cells."""
    makespan_errors: dict[str, float]
    """Mean |error| of the makespan per rule (tokens)."""
    meets: tuple[int, int]
    """(cells within max(0.10, floor + 2 SE), cells scored)."""

    def verdict(self) -> str:
        """The forecast against the best naive rule (the lowest mean |error| of
        :data:`NAIVE_RULES`), in one line: P(max/median > tau) over the scored cells and
        the makespan, each with the margin, then P against the other runs' mean (lookup)
        where there are other runs. Judged on the numbers as printed (3 decimals for P, 1
        for tokens): a tie there does not beat."""
        parts = [
            _versus("P(max/median > tau)", self.errors, NAIVE_RULES, 3),
            _versus("makespan", self.makespan_errors, NAIVE_RULES, 1, " tokens"),
        ]
        if "floor" in self.errors:
            parts.append(_versus("P, lookup", self.errors, ("floor",), 3))
        return "verdict: " + "; ".join(parts)


NAIVE_RULES = ("persistence", "linear", "static")
"""The naive rules a forecast is judged against (:data:`calibration.validation.forecast.RULES`
less the forecast itself)."""


def _versus(
    what: str, errors: dict[str, float], rules: Sequence[str], decimals: int, unit: str = ""
) -> str:
    """``what: forecast 0.073 does not beat the best naive rule, persistence, 0.050 (worse
    by 0.023)``: the forecast's mean |error| in ``errors`` against the lowest of ``rules``
    (lower is better; ``floor`` is named the other runs' mean), both rounded to
    ``decimals`` first."""
    mine = round(errors["forecast"], decimals)
    finite = {r: round(errors[r], decimals) for r in rules if errors[r] == errors[r]}
    if mine != mine or not finite:
        return f"{what}: no scored cell"
    name, best = min(finite.items(), key=lambda kv: kv[1])
    label = "the other runs' mean" if name == "floor" else f"the best naive rule, {name},"

    def num(x: float) -> str:
        return f"{x:.{decimals}f}{unit}"

    word, margin = ("beats", "better") if mine < best else ("does not beat", "worse")
    return (
        f"{what}: forecast {num(mine)} {word} {label} {num(best)} "
        f"({margin} by {num(abs(best - mine))})"
    )


def forecast_study(
    files: Sequence[str], names: FieldNames, tokenizer: str | None, cfg: ForecastConfig
) -> ForecastStudy:
    """Forecast the steps after ``cfg.fit_steps`` of the first of ``files`` (one run each);
    the others, runs of the same configuration, give the floor. Raises ValueError (file,
    line, field, or a setting the runs cannot meet) or OSError."""
    runs = [read_grouped([f], names, tokenizer) for f in files]
    for t in runs:
        t.check_cap(cfg.cap)
    cells, makespan = forecast_runs(runs[0], runs[1:], cfg)
    return ForecastStudy(
        cells,
        makespan,
        runs[0].length_unit,
        cell_errors(cells),
        makespan_errors(makespan),
        meets_target(cells),
    )
