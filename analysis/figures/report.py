"""One self-contained HTML page per study directory, its answer first.

A page opens with the study's question, its finding in a sentence and a short table
(:mod:`analysis.figures.answers`), then the figures (embedded PNG, one caption each), then the
study's tables folded, and at the bottom the configuration folded with its provenance
(input data, the rolloutlab commit, library versions). Nothing outside the page is
referenced: it opens offline. Numbers are written by :mod:`analysis.figures.numbers`.

A study directory is any output of ``rolloutlab sim``, ``sweep``, ``advise``,
``stability``, ``compare idle|collapse|horizon|learning``, ``compare groups|verl-tb``
(and, shown without an answer, any folder with a figure or one of :data:`TABLES`).
"""

from __future__ import annotations

import base64
import html
import json
import re
import textwrap
from pathlib import Path

import polars as pl
from rolloutlab.analysis.figures import numbers as fmt
from rolloutlab.analysis.figures.answers import (
    ANSWERS,
    Answer,
    AnswerBug,
    AnswerError,
    answer,
    study_kind,
)
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
    "comparison.png": "Per controller: share of steps at each group size G; straggler-ratio quantiles "
    "(box 25-75 %, whiskers 5-95 %) against tau; step time as a rolling mean with its 25-75 % "
    "band; reward against wall clock up to where every run has reached the target.",
    "learning_comparison.png": "Per real run: measured and predicted (mean-field) training reward "
    "against wall clock or CPU time; the dashed line is the target.",
    "sweep.png": "Per controller over the prompt batch B: wall clock and tokens/s, mean and sd over seeds.",
    "advise.png": "Every trial's predicted time to the target against its straggler rate and "
    "collapse margin; the recommended setting marked.",
    "horizon.png": "Held-out runs: predicted against measured collapse step (left); the fitted "
    "horizon law per S against the learning rate (right).",
    "validation_groups.png": "P(max/median > tau) per group size G: measured (with its standard "
    "error) and predicted from the fit at one G.",
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

TABLES = (
    "summary.csv",
    "means.csv",
    "pareto.csv",
    "trials.csv",
    "stability.csv",
    "horizon.csv",
    "idle_summary.csv",
    "collapse_scaling.csv",
    "horizon_points.csv",
    "learning_comparison_by_controller.csv",
    "learning_comparison.csv",
    "learning_directions.csv",
    "validation_groups.csv",
    "validation.csv",
    "replay.csv",
    "run_spread.csv",
    "runs.csv",
)
"""The tables a page shows (folded, below the figures), in this order."""

SHOWN_ROWS = 200
"""Rows of a folded table shown on the page (the file holds them all)."""

_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1180px;margin:1.2em auto;padding:0 16px;"
    "color:#222;line-height:1.4}"
    "h1{font-size:1.5em;margin:.2em 0}h1 small{color:#666;font-weight:normal;font-size:.6em}"
    ".question{color:#555;margin:.2em 0}"
    ".headline{font-size:1.12em;margin:.5em 0 .6em;padding:.5em .8em;background:#f3f7fb;"
    "border-left:4px solid #3b7dd8}"
    ".scroll{overflow-x:auto;max-width:100%}"
    "table{border-collapse:collapse;font-size:13px;margin:.4em 0}"
    "td,th{border:1px solid #d4d4d4;padding:3px 8px;text-align:right;white-space:nowrap}"
    "th{background:#f0f0f0;white-space:normal;max-width:9em;vertical-align:bottom}"
    "td:first-child,th:first-child{text-align:left}"
    "tr.best td{background:#e5f4e3;font-weight:600}"
    ".note{font-size:13px;color:#555;margin:.2em 0}"
    "figure{margin:1em 0;overflow-x:auto}img{max-width:100%;height:auto;border:1px solid #ddd;"
    "cursor:zoom-in}img.zoomed{max-width:none;width:200%;cursor:zoom-out}"
    "figcaption{font-size:13px;color:#444}"
    "details{margin:.6em 0}summary{cursor:pointer;font-weight:600}"
    "pre{background:#f7f7f7;padding:8px;font-size:11px;overflow-x:auto;max-height:40em}"
    ".provenance{font-size:12px;color:#555}"
)

_ZOOM = (  # click a figure to see it at twice the page width (its box scrolls); again to fit
    "document.querySelectorAll('figure img').forEach(i=>i.addEventListener('click',"
    "()=>i.classList.toggle('zoomed')));"
)


class ReportError(ValueError):
    """A directory that is not a study (no config.json, no figure, no table), or a study
    file that cannot be read (the message names the file and field)."""


def _read_json(path: Path) -> dict:
    """A JSON object file of a study. Raises :class:`ReportError` naming the file when it
    cannot be read or is not a JSON object."""
    return read_object(path, ReportError)


def _cells(df: pl.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Headers (with units) and formatted cells of ``df`` (:mod:`analysis.figures.numbers`): one
    seconds unit per column, chosen from its values."""
    units = {c: fmt.seconds_unit(df[c].to_list()) for c in df.columns if fmt.is_seconds(c)}
    heads = [fmt.header(c, units.get(c)) for c in df.columns]
    rows = [
        [fmt.cell(c, v, units.get(c)) for c, v in zip(df.columns, row)] for row in df.iter_rows()
    ]
    return heads, rows


def table_html(df: pl.DataFrame, css: str = "", best: tuple[bool, ...] = ()) -> str:
    """``df`` as an HTML table inside a box that scrolls sideways when it is wider than the
    page; rows flagged in ``best`` get ``class='best'``."""
    heads, rows = _cells(df)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in heads)
    body = "".join(
        f"<tr{' class=best' if i < len(best) and best[i] else ''}>"
        + "".join(f"<td>{html.escape(c)}</td>" for c in r)
        + "</tr>"
        for i, r in enumerate(rows)
    )
    cls = f" class='{css}'" if css else ""
    return f"<div class=scroll><table{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def answer_text(ans: Answer, width: int = 100) -> str:
    """The answer for a terminal ``width`` columns wide: the headline wrapped, then the
    table (:func:`analysis.numbers.text_table`, best rows starred)."""
    heads, rows = _cells(ans.table)
    glued = re.sub(r"(\d) (%|s|h)(?!\w)", "\\1\0\\2", ans.headline)  # a number keeps its unit
    return (
        textwrap.fill(glued, width).replace("\0", " ")
        + "\n"
        + fmt.text_table(heads, rows, width, ans.best or None)
    )


def printed_answer(study: str | Path, width: int = 100) -> str:
    """:func:`answer_text` of ``study`` ("" for a kind without an answer). Raises
    :class:`ReportError` on a malformed study file."""
    study = Path(study)
    cfg_path = study / "config.json"
    cfg = _read_json(cfg_path) if cfg_path.exists() else {}
    try:
        ans = answer(study, cfg)
    except AnswerError as exc:
        raise ReportError(str(exc)) from None
    return "" if ans is None else answer_text(ans, width)


def _answer_html(ans: Answer) -> str:
    notes = "".join(f"<p class=note>{html.escape(n)}</p>" for n in ans.notes)
    return (
        f"<p class=question>{html.escape(ans.question)}</p>"
        f"<p class=headline>{html.escape(ans.headline)}</p>"
        + table_html(ans.table, "answer", ans.best)
        + notes
    )


def _provenance(cfg: dict) -> list[str]:
    """Lines naming the study's inputs, the rolloutlab commit and the main libraries."""
    lines = []
    inputs = [
        str(v) if not isinstance(v, list) else ", ".join(map(str, v))
        for k in ("real", "fit", "run", "runs", "studies", "sim", "verl_config")
        if (v := cfg.get(k)) and isinstance(v, (str, list))
    ]
    if inputs:
        lines.append("inputs: " + "; ".join(inputs))
    cal = cfg.get("calibration")
    if isinstance(cal, dict):
        prov = cal.get("provenance") or {}
        sources = prov.get("sources") or []
        origin = prov.get("origin") or prov.get("kind")
        lines.append(
            f"scenario {cal.get('name', '?')}: "
            + (f"{origin}; " if origin else "")
            + f"{len(sources)} source files (paths and sha256 in the configuration)"
        )
    v = cfg.get("versions") or {}
    if v:
        libs = ", ".join(
            f"{k} {v[k]}"
            for k in ("python", "numpy", "polars", "simpy", "torch", "vllm")
            if v.get(k)
        )
        lines.append(
            f"rolloutlab {v.get('rolloutlab', '?')}, commit {v.get('commit') or 'not recorded'}; {libs}"
        )
    return lines


def _short(obj, depth: int = 0):
    """``obj`` with lists longer than 12 cut to their first 12 items and a count (the
    configuration block stays readable; the file holds everything)."""
    if isinstance(obj, dict):
        return {k: _short(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list) and len(obj) > 12:
        return [_short(x, depth + 1) for x in obj[:12]] + [f"... {len(obj) - 12} more"]
    if isinstance(obj, list):
        return [_short(x, depth + 1) for x in obj]
    return obj


def current_figures(study: Path) -> tuple[list[Path], list[Path]]:
    """The figures (``*.png``) of ``study`` split into those written with its results and
    the stale ones: a figure older than the file that holds the study's answer (its
    summary, :data:`~analysis.figures.answers.ANSWERS`) was left by an earlier run into
    the same folder (e.g. ``sim --no-figure`` over a ``sim`` with its figure)."""
    figures = sorted(study.glob("*.png"))
    kind = study_kind(study)
    if kind is None:
        return figures, []
    summary = (study / ANSWERS[kind][0]).stat().st_mtime_ns
    fresh = [f for f in figures if f.stat().st_mtime_ns >= summary]
    return fresh, [f for f in figures if f not in fresh]


def render(study: str | Path) -> str:
    """The HTML page of one study directory. Raises :class:`ReportError` when ``study``
    has neither a figure nor a table, or a study file is malformed."""
    study = Path(study)
    cfg_path = study / "config.json"
    cfg = _read_json(cfg_path) if cfg_path.exists() else {}
    figures, stale = current_figures(study)
    tables = [study / t for t in TABLES if (study / t).exists()]
    if not figures and not tables:
        raise ReportError(
            f"{study}: no figure (*.png) and no table ({', '.join(TABLES)}); "
            "is this a study output directory?"
        )
    try:
        ans = answer(study, cfg)
    except AnswerError as exc:
        raise ReportError(str(exc)) from None
    kind = study_kind(study) or str(cfg.get("kind") or cfg.get("command") or "study")
    parts = [
        "<!doctype html><html lang=en><head><meta charset='utf-8'>"
        "<meta name=viewport content='width=device-width,initial-scale=1'>"
        f"<title>{html.escape(study.name)}: {html.escape(kind)}</title>"
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(study.name)} <small>rolloutlab {html.escape(kind)}</small></h1>",
    ]
    if ans is not None:
        parts.append(_answer_html(ans))
    if kind in INTRO:
        parts.append(f"<p class=note>{html.escape(INTRO[kind])}</p>")
    if stale:
        parts.append(
            f"<p class=note>Not shown, older than the study's results (left by an earlier run): "
            f"{html.escape(', '.join(f.name for f in stale))}</p>"
        )
    for fig in figures:
        data = base64.b64encode(fig.read_bytes()).decode()
        caption = CAPTIONS.get(fig.name, fig.stem.replace("_", " "))
        parts.append(
            f"<figure><img alt='{html.escape(fig.name)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        )
    for t in tables:
        try:
            df = pl.read_csv(t, infer_schema_length=None)
        except (OSError, pl.exceptions.PolarsError) as exc:
            raise ReportError(f"{t}: not a readable CSV table ({exc})") from None
        more = f", first {SHOWN_ROWS} shown" if df.height > SHOWN_ROWS else ""
        parts.append(
            f"<details{' open' if ans is None else ''}><summary>{html.escape(t.name)} "
            f"({df.height} rows{more})</summary>" + table_html(df.head(SHOWN_ROWS)) + "</details>"
        )
    if cfg:
        shown = {k: v for k, v in cfg.items() if k != "versions"}
        parts.append(
            "<details><summary>Configuration and provenance</summary>"
            + "".join(f"<p class=provenance>{html.escape(x)}</p>" for x in _provenance(cfg))
            + "<pre>"
            + html.escape(json.dumps(_short(shown), indent=2, default=str))
            + "</pre>"
            + (
                "<pre>" + html.escape(json.dumps(cfg["versions"], indent=2)) + "</pre>"
                if "versions" in cfg
                else ""
            )
            + "</details>"
        )
        parts.extend(f"<p class=provenance>{html.escape(x)}</p>" for x in _provenance(cfg)[-1:])
    parts.append(f"<script>{_ZOOM}</script></body></html>")
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


def write_reports(studies: list[Path], out_dir: Path) -> tuple[list[Path], dict[Path, Exception]]:
    """Write ``out_dir/<study name>.html`` for each study that renders (a study given twice
    once), atomically. Returns the pages written and, per study that did not render, its
    error (:class:`ReportError` for a directory that is not a study or a malformed file,
    :class:`~analysis.figures.answers.AnswerBug` for a failing answer): one bad study
    does not cost the others their pages. Raises :class:`ReportError` (before writing
    anything) when two studies would share a page name."""
    names = page_names(studies)
    pages: dict[str, str] = {}
    failed: dict[Path, Exception] = {}
    for s, n in zip(studies, names):
        if n in pages or s in failed:
            continue
        try:
            pages[n] = render(s)
        except (ReportError, AnswerBug) as exc:
            failed[s] = exc
    if pages:
        out_dir.mkdir(parents=True, exist_ok=True)
    return [strict_json.write_atomic(out_dir / n, page) for n, page in pages.items()], failed
