"""docs/glossary.md names every trace column and every option of the CLI's vocabulary.

A column or option the glossary does not name is one a user cannot look up: the test lists
them. Names count when they appear inside backticks (a table cell or the text)."""

from __future__ import annotations

import re
from pathlib import Path

from rolloutlab.sim.trace.schema import ROLLOUT_SCHEMA, STEP_SCHEMA

from rolloutlab.commands.options.vocabulary import VOCABULARY

GLOSSARY = Path(__file__).resolve().parents[1] / "docs" / "glossary.md"


def backticked_words(text: str) -> set[str]:
    """Every option- or column-like word inside a backticked span of ``text``."""
    return {w for span in re.findall(r"`([^`]+)`", text) for w in re.findall(r"[\w/-]+", span)}


def test_backticked_words_reads_spans_only():
    assert backticked_words("a `--out DIR` and `gen_time`, not kl") == {"--out", "DIR", "gen_time"}


def test_every_trace_column_is_named():
    named = backticked_words(GLOSSARY.read_text())
    missing = [c for c in (*ROLLOUT_SCHEMA, *STEP_SCHEMA) if c not in named]
    assert not missing, f"docs/glossary.md does not name the trace columns {missing}"


def test_every_vocabulary_option_is_named():
    named = backticked_words(GLOSSARY.read_text())
    missing = [o for term in VOCABULARY for o in term.options if o not in named]
    assert not missing, f"docs/glossary.md does not name the options {missing}"
