"""Checks on the samples of grouped per-sample files that a single record cannot show:
a group given twice (:func:`refuse_repeats`), one prompt id naming different prompts
(:func:`refuse_reused_ids`). Each raises :class:`GroupedDataError` naming the file, the
line and the field: the alternative is merging or splitting groups silently."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from rolloutlab.calibration.readers.record_files import GroupedDataError


def refuse_repeats(rows: list[dict], path: Path, f: dict, per_prompt: bool) -> list[dict]:
    """``rows`` as they are, after checking no group is given twice: with one record per
    prompt (``per_prompt``), a prompt id (field ``f["prompt"]``) repeated within a step;
    with one record per sample and a sample field, a (step, prompt, sample) repeated.
    Without a prompt field (prompts numbered by line) or, per sample, without a sample
    field (samples numbered in file order) nothing can repeat.

    Raises :class:`GroupedDataError` naming the file, both lines and the field: two
    records of one group would otherwise be merged into one larger group, silently.
    """
    if f["prompt"] is None or (not per_prompt and f["sample"] is None):
        return rows
    first: dict[tuple, int] = {}
    for r in rows:
        key = (r["step"], r["prompt"]) if per_prompt else (r["step"], r["prompt"], r["sample_idx"])
        seen = first.setdefault(key, r["line"])
        if seen != r["line"]:
            what = f"prompt {r['prompt']!r}" + ("" if per_prompt else f" sample {r['sample_idx']}")
            raise GroupedDataError(
                f"{path}: line {r['line']}: field {f['prompt']!r}: {what} of step {r['step']} "
                f"repeats line {seen}; give each group once (drop or rename the duplicate)"
            )
    return rows


def refuse_reused_ids(df: pl.DataFrame, id_field: str, text_field: str) -> None:
    """Check that each prompt id of ``df`` (columns ``source``, ``line``, ``step``,
    ``prompt``, ``prompt_text``: the id and the text of field ``text_field``) names one
    prompt text over every step: an id reused for different prompts (a batch position
    logged as ``index``, a counter restarted per step) would merge or split groups and
    track the wrong prompt over steps.

    Raises :class:`GroupedDataError` naming the file and line of the first row whose
    text differs from its id's first text, both steps and the field."""
    known = df.filter(pl.col("prompt_text").is_not_null())
    if known.is_empty():
        return
    first = known.group_by("prompt", maintain_order=True).agg(
        pl.col("prompt_text").first().alias("first_text"),
        pl.col("step").first().alias("first_step"),
        pl.col("line").first().alias("first_line"),
        pl.col("source").first().alias("first_source"),
    )
    bad = known.join(first, on="prompt").filter(pl.col("prompt_text") != pl.col("first_text"))
    if bad.height:
        r = bad.row(0, named=True)
        raise GroupedDataError(
            f"{r['source']}: line {r['line']}: field {id_field!r}: id {r['prompt']!r} names "
            f"another prompt (field {text_field!r}) at step {r['step']} than at step "
            f"{r['first_step']} ({r['first_source']}: line {r['first_line']}); ids must name "
            "one prompt: give the id field with --prompt-field (or the text field)"
        )


ID_FIELDS = ("prompt_id", "uid", "idx", "index")
"""Prompt-id spellings (not texts) that, present together, must group alike."""


def refuse_ambiguous_ids(recs: list, chosen: str, step_field: str | None, path: Path) -> None:
    """Check that every other prompt-id field of :data:`ID_FIELDS` present in ``recs``
    (``(line, record)`` pairs) groups the samples of each step as the ``chosen`` field
    does (one value of the other for each value of ``chosen``, and back): a verl ``uid``
    beside a dataset ``index`` agree unless one prompt was sampled in two rounds (then
    ``index`` merges them and ``uid`` does not), and a per-sample counter beside a prompt
    id never agrees. Only called when no ``--prompt-field`` was given.

    Raises :class:`GroupedDataError` naming the file, the line and both fields, asking
    for ``--prompt-field``."""
    for other in ID_FIELDS:
        if other == chosen or not any(other in r for _, r in recs):
            continue
        fwd: dict = {}
        back: dict = {}
        for no, r in recs:
            a, b = r.get(chosen), r.get(other)
            if a is None or b is None:
                continue
            step = r.get(step_field) if step_field else None
            ka, kb = (step, str(a)), (step, str(b))
            if fwd.setdefault(ka, kb) != kb or back.setdefault(kb, ka) != ka:
                raise GroupedDataError(
                    f"{path}: line {no}: field {other!r}: groups the samples of step "
                    f"{step if step is not None else 0} otherwise than field {chosen!r} "
                    f"({chosen} {a!r}, {other} {b!r}); name the prompt's id with --prompt-field"
                )
