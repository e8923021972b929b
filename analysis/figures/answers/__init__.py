"""The answer a study page opens with: the study's question, its finding in a sentence
and a short table, read from the files the study wrote.

One function per study kind (:data:`ANSWERS`), chosen by :func:`study_kind` from the
study's files: :mod:`.comparisons` mark their best row, :mod:`.predictions` put the
model's error beside the naive rules' and the floor and mark the rows the fit never saw.
Every number in a sentence goes through :mod:`analysis.figures.numbers`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl
from rolloutlab.analysis.figures.answers.base import Answer, AnswerError
from rolloutlab.analysis.figures.answers.comparisons import (
    advise_answer,
    sim_answer,
    stability_answer,
    sweep_answer,
)
from rolloutlab.analysis.figures.answers.predictions import (
    collapse_answer,
    horizon_answer,
    idle_answer,
    learning_answer,
    validate_groups_answer,
    validate_replay_answer,
    validate_verl_answer,
)

__all__ = ["ANSWERS", "Answer", "AnswerBug", "AnswerError", "answer", "study_kind"]

ANSWERS: dict[str, tuple[str, Callable[[Path, dict], Answer]]] = {
    "compare-idle": ("idle_summary.json", idle_answer),
    "compare-collapse": ("collapse_summary.json", collapse_answer),
    "compare-horizon": ("horizon_summary.json", horizon_answer),
    "compare-learning": ("learning_comparison.csv", learning_answer),
    "advise": ("trials.csv", advise_answer),
    "sweep": ("means.csv", sweep_answer),
    "stability": ("stability.csv", stability_answer),
    "validate-groups": ("validation_groups.csv", validate_groups_answer),
    "validate-verl-tb": ("validation.csv", validate_verl_answer),
    "validate-replay": ("replay.csv", validate_replay_answer),
    "sim": ("summary.csv", sim_answer),
}
"""Study kind -> (the file that marks it, its answer). Checked in this order: a study
that writes several of these files is the first kind it matches."""


def study_kind(study: Path) -> str | None:
    """The kind of ``study`` (a key of :data:`ANSWERS`) from the files in it; None when
    it holds none of them."""
    for kind, (marker, _) in ANSWERS.items():
        if (study / marker).exists():
            return kind
    return None


class AnswerBug(RuntimeError):
    """An answer builder that failed on a study whose files it could read: a bug in
    rolloutlab, not the user's malformed input."""


def answer(study: Path, cfg: dict) -> Answer | None:
    """The answer of ``study`` (its config ``cfg``), None for a kind without one.
    Raises :class:`AnswerError` naming the file and field of a malformed study file,
    :class:`AnswerBug` when the builder itself fails (a missing key, a wrong type)."""
    kind = study_kind(study)
    if kind is None:
        return None
    marker = study / ANSWERS[kind][0]
    try:
        return ANSWERS[kind][1](study, cfg)
    except pl.exceptions.PolarsError as exc:
        raise AnswerError(f"{marker}: malformed ({type(exc).__name__}: {exc})") from None
    except (KeyError, TypeError, IndexError) as exc:
        raise AnswerBug(
            f"{study}: the {kind} answer failed ({type(exc).__name__}: {exc}): a bug in "
            "rolloutlab's report, not in the study's files; please report it with this folder"
        ) from exc
