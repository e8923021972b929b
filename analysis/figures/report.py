"""One self-contained HTML page per study directory: what was run, its configuration,
every figure (embedded as base64 PNG) with a one-line caption, and the numbers.

A study directory is any output of ``rolloutlab compare idle``, ``compare collapse``,
``compare learning``,
``sim``, ``stability`` or ``real sync``: the page is built from its ``config.json``, its
``*.png`` and its summary tables (``*summary*.csv``, ``collapse_scaling.csv``,
``summary.csv``). Nothing outside the page is referenced.
"""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

import polars as pl
from rolloutlab.analysis.inputs.run_input import read_object
from rolloutlab.sim.trace import strict_json

CAPTIONS = {
    "idle_scatter.png": "Held-out steps: simulated against measured generation makespan (left) and slot "
    "idle fraction (right); on the dashed line the prediction is exact.",
    "idle_timeseries.png": "Per step: group size, makespan, slot idle fraction and straggler ratio, "
    "measured (black) and predicted; grey = steps used to calibrate.",
    "collapse.png": "Left: held-out grid runs, green where the fitted model predicts the measured "
    "class. Right: the two scaling laws per S; flat lines mean the law holds.",
    "phase_diagram.png": "Collapsed fraction over seeds per (S, learning rate); black: closed-form eta_max.",
    "comparison.png": "Per controller: group size, straggler ratio and cumulative wall clock per step.",
    "learning_comparison.png": "Per real run: measured and predicted (mean-field) training reward "
    "against wall clock or CPU time; the dashed line is the target.",
}
"""One-line caption per known figure; other figures get their file name."""

INTRO = {
    "compare-idle": "A real synchronous GRPO run was traced. The simulator's cost model was fitted to the "
    "finish times of the first K steps and its length model to their response lengths; "
    "then every later step was simulated with the same group size and prompts, and the "
    "predicted generation makespan, slot idle fraction (padding waste while the slowest "
    "rollout finishes) and straggler events are compared with the measured ones. "
    "'drawn' draws lengths from the fitted model (the whole simulator); 'replay' uses the "
    "measured lengths (the engine and cost model only); 'constant' is the naive baseline.",
    "compare-learning": "The simulator's learning model (initial pass rates, gain, capacity) and a "
    "step-cost model were fitted on one or several real GRPO runs; every run's time to the "
    "target was predicted as the median over runs drawn from the model at its own group "
    "sizes, batch and learning rate, and compared with the measured one (relative error and "
    "rank per run; per controller over seeds: measured mean and sd beside the prediction).",
    "compare-collapse": "A stability grid (staleness S x learning rate x seed, each run marked collapsed or "
    "not, with its collapse step) was split in two. The collapse model's constants were "
    "fitted on one half and the other half predicted. Both scaling laws of the staleness "
    "paper (S * eta_max and M_collapse * S * eta roughly constant) are checked per S on "
    "the measured grid, the fitted model and a simulated grid.",
}

_TABLES = (
    "idle_summary.csv",
    "collapse_scaling.csv",
    "learning_comparison_by_controller.csv",
    "learning_comparison.csv",
    "summary.csv",
)
_STYLE = (
    "body{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}"
    "table{border-collapse:collapse;font-size:12px;margin:1em 0}"
    "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}th{background:#f0f0f0}"
    "img{max-width:100%;border:1px solid #ddd}figcaption{font-size:13px;color:#444;margin-bottom:1.5em}"
    "pre{background:#f7f7f7;padding:8px;font-size:11px;overflow-x:auto}"
)


class ReportError(ValueError):
    """A directory that is not a study (no config.json, no figure, no table)."""


def _table_html(df: pl.DataFrame) -> str:
    def cell(v) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return html.escape(str(v))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in df.columns)
    rows = "".join(
        "<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in df.iter_rows()
    )
    return f"<table><tr>{head}</tr>{rows}</table>"


def _read_json(path: Path) -> dict:
    """A JSON object file of a study. Raises :class:`ReportError` naming the file when it
    cannot be read or is not a JSON object."""
    return read_object(path, ReportError)


def _headline(cfg: dict, study: Path) -> list[str]:
    """Key numbers in words, from the summary JSON of a comparison. Raises
    :class:`ReportError` naming the file and field of a malformed summary."""
    lines = []
    idle = study / "idle_summary.json"
    if idle.exists():
        try:
            rows = {(r["prediction"], r["scope"]): r for r in _read_json(idle)["summary"]}
            for pred in ("drawn", "replay", "constant"):
                r = rows.get((pred, "all"))
                if r:
                    lines.append(
                        f"{pred}: median absolute makespan error "
                        f"{100 * r['makespan_mdape']:.1f} % over "
                        f"{r['held_out_steps']} held-out steps; idle fraction off by "
                        f"{100 * r['idle_mae']:.1f} points on average"
                    )
        except (KeyError, TypeError, ValueError) as exc:
            raise ReportError(f"{idle}: malformed summary (field {exc})") from None
    coll = study / "collapse_summary.json"
    if coll.exists():
        try:
            h = _read_json(coll)["held_out"]
            lines.append(
                f"collapse classification agrees on {100 * h['agreement']:.1f} % of "
                f"{h['points']} held-out runs; collapse step off by a median "
                f"{100 * h['t_collapse_mdape']:.1f} % where both collapse"
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ReportError(f"{coll}: malformed summary (field {exc})") from None
    return lines


def render(study: str | Path) -> str:
    """The HTML page of one study directory. Raises :class:`ReportError` when ``study``
    has neither a figure nor a summary table."""
    study = Path(study)
    cfg_path = study / "config.json"
    cfg = _read_json(cfg_path) if cfg_path.exists() else {}
    figures = sorted(study.glob("*.png"))
    tables = [study / t for t in _TABLES if (study / t).exists()]
    if not figures and not tables:
        raise ReportError(
            f"{study}: no figure (*.png) and no summary table ({', '.join(_TABLES)}); "
            "is this a study output directory?"
        )
    kind = str(cfg.get("kind") or cfg.get("command") or "study")
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(study.name)}</title>"
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(study.name)} <small>({html.escape(kind)})</small></h1>",
        f"<p>{html.escape(INTRO.get(kind, 'Output of a rolloutlab study.'))}</p>",
    ]
    headline = _headline(cfg, study)
    if headline:
        parts.append(
            "<h2>Numbers</h2><ul>"
            + "".join(f"<li>{html.escape(x)}</li>" for x in headline)
            + "</ul>"
        )
    for t in tables:
        try:
            df = pl.read_csv(t)
        except (OSError, pl.exceptions.PolarsError) as exc:
            raise ReportError(f"{t}: not a readable CSV table ({exc})") from None
        parts.append(f"<h3>{html.escape(t.name)}</h3>" + _table_html(df))
    if figures:
        parts.append("<h2>Figures</h2>")
    for fig in figures:
        data = base64.b64encode(fig.read_bytes()).decode()
        caption = CAPTIONS.get(fig.name, fig.stem.replace("_", " "))
        parts.append(
            f"<figure><img alt='{html.escape(fig.name)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        )
    if cfg:
        shown = {k: v for k, v in cfg.items() if k != "versions"}
        parts.append(
            "<h2>Configuration</h2><pre>"
            + html.escape(json.dumps(shown, indent=2, default=str))
            + "</pre>"
        )
        if "versions" in cfg:
            parts.append(
                "<h3>Library versions</h3><pre>"
                + html.escape(json.dumps(cfg["versions"], indent=2))
                + "</pre>"
            )
    parts.append("</body></html>")
    return "\n".join(parts)


def safe_file_name(name: str) -> str:
    """``name`` with every character but letters, digits, ``.``, ``_``, ``-`` and ``=``
    replaced by ``_``: a folder named after a spec (``cmp_sagc:tau=1.6,delta=0.2``) gives
    ``cmp_sagc_tau=1.6_delta=0.2``, a file name every filesystem and browser takes (a
    colon is a drive separator on Windows and a URL scheme in a link)."""
    return re.sub(r"[^A-Za-z0-9._=-]", "_", name)


def page_names(studies: list[Path]) -> list[str]:
    """``<study folder name>.html`` per study (:func:`safe_file_name`). Raises
    :class:`ReportError` when two studies would be written to one name (two folders of
    the same name, or of names that differ only in replaced characters)."""
    names = [f"{safe_file_name(Path(s).resolve().name)}.html" for s in studies]
    seen: dict[str, Path] = {}
    for s, n in zip(studies, names):
        if n in seen and Path(seen[n]).resolve() != Path(s).resolve():
            raise ReportError(
                f"{seen[n]} and {s} would both be written to {n}; report studies with "
                "distinct folder names (one call each)"
            )
        seen.setdefault(n, s)
    return names


def write_reports(studies: list[Path], out_dir: Path) -> list[Path]:
    """Write ``out_dir/<study name>.html`` for each study (a study given twice once),
    atomically; returns the paths. Raises :class:`ReportError` (before writing anything)
    on a directory that is not a study, a malformed summary, or two studies of one name."""
    names = page_names(studies)
    pages = dict(zip(names, (render(s) for s in studies)))
    out_dir.mkdir(parents=True, exist_ok=True)
    return [strict_json.write_atomic(out_dir / n, page) for n, page in pages.items()]
