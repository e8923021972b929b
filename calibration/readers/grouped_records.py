"""Records of grouped per-sample files (JSONL, CSV, parquet) turned into one row per
sample: field lookup by name or common spelling, lengths from numbers or texts, caps and
finish reasons as censoring. The layouts and rules are described in
:mod:`calibration.readers.grouped`, which adds the project's own rollout traces."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from rolloutlab.calibration.readers.grouped_checks import ID_FIELDS, refuse_ambiguous_ids
from rolloutlab.calibration.readers.record_files import GroupedDataError, records

__all__ = [
    "CANDIDATES",
    "FieldNames",
    "FileRows",
    "GroupedDataError",
    "LengthCounter",
    "read_records",
]


CANDIDATES: dict[str, tuple[str, ...]] = {
    "step": ("step", "global_step", "training_step", "iteration"),
    "lengths": (
        "response_lengths",
        "lengths",
        "response_length",
        "response_tokens",
        "response_len",
        "completion_length",
        "completion_tokens",
        "output_tokens",
        "output",
        "outputs",
        "responses",
        "response",
        "completion",
        "completions",
    ),
    "prompt": ("prompt_id", "uid", "idx", "index", "prompt", "question", "input", "query"),
    "prompt_tokens": ("prompt_tokens", "input", "prompt_length", "input_tokens"),
    "reward": ("score", "reward", "scores", "rewards", "correct"),
    "cap": ("max_response_length", "max_tokens", "response_cap", "max_model_len"),
    "finish_reason": ("finish_reason", "finish_reasons", "stop_reason"),
    "sample": ("sample_idx", "sample_index"),
}
"""Field -> names tried in order when :class:`FieldNames` leaves it ``None``."""

COUNT_FIELDS = CANDIDATES["lengths"][: CANDIDATES["lengths"].index("output")]
"""Length spellings whose name says the field counts (``response_lengths`` ...
``output_tokens``): a text there is a number stored as text or a wrong field, never a
response to count (the others, ``output``, ``response`` ..., may hold texts)."""

MAX_LENGTH = 10_000_000
"""Largest response length, response cap or prompt length read (tokens): the longest
context window of any released model (Llama 4 Scout, 10M tokens), so a longer one was
never generated and is a unit or data error; it also keeps every length within the
Int64 columns (1e300 or 2**64 would overflow them)."""

TEXT_FIELDS = ("prompt", "question", "input", "query", "problem")
"""Fields that may hold a prompt's text: beside an id field, the text checks the id
(:func:`calibration.readers.grouped_checks.refuse_reused_ids`)."""


@dataclass
class FileRows:
    """What :func:`read_records` read from one file: ``rows`` (one dict per sample),
    ``fields`` (the field used for each :data:`CANDIDATES` key, None if absent),
    ``per_prompt`` (one record per prompt rather than per sample) and ``text_field``
    (a prompt-text field beside the id field, whose text each row keeps under
    ``prompt_text``; None when the id is the text or no text exists)."""

    rows: list[dict]
    fields: dict = field(default_factory=dict)
    per_prompt: bool = False
    text_field: str | None = None


@dataclass(frozen=True)
class FieldNames:
    """Field names of a grouped file; ``None`` = the first of :data:`CANDIDATES` present."""

    step: str | None = None
    lengths: str | None = None
    prompt: str | None = None
    prompt_tokens: str | None = None
    reward: str | None = None
    cap: str | None = None
    finish_reason: str | None = None
    sample: str | None = None


def _pick(name: str | None, key: str, columns, where: str, required: bool = False):
    if name is not None:
        if name not in columns:
            raise GroupedDataError(f"{where}: no field {name!r} ({key})")
        return name
    found = next((c for c in CANDIDATES[key] if c in columns), None)
    if found is None and required:
        raise GroupedDataError(
            f"{where}: no {key} field (tried {', '.join(CANDIDATES[key])}; name it with "
            f"--{key.replace('_', '-')}-field)"
        )
    return found


def _shown(v: float) -> str:
    """A number as the file wrote it: an int in full, a float in ``%g`` form."""
    return f"{v:g}" if isinstance(v, float) else str(v)


def check_bound(v: float, what: str, where: str) -> None:
    """Raise GroupedDataError naming ``where`` when ``v`` is above :data:`MAX_LENGTH`."""
    if v > MAX_LENGTH:
        raise GroupedDataError(
            f"{where}: {what} {_shown(v)} above {MAX_LENGTH:,} tokens, the longest context "
            "window of any released model: a unit or data error"
        )


class LengthCounter:
    """Turns one length value (a number, or a text) into an int >= 1; counts texts.

    One field holds numbers or texts, never both: the first value of each field fixes
    which (a mixture would count some samples in characters, silently)."""

    def __init__(self, tokenizer: str | None):
        self.tokenizer_name, self._tok, self.texts = tokenizer, None, 0
        self.tried = False
        self.numbers: set[str] = set()  # fields that held numeric lengths
        self.kinds: dict[str, tuple[str, int | None]] = {}  # file+field -> (kind, first line)

    def unit(self) -> str:
        """What the lengths count: numbers as given (tokens for the project's traces);
        texts in tokens of the tokenizer when it loaded, else in characters."""
        if not self.texts:
            given = ", ".join(sorted(self.numbers))
            return f"numbers of field {given!r}, unit as given" if given else "tokens"
        if self._tok is not None:
            return f"tokens (tokenizer {self.tokenizer_name})"
        if self.tokenizer_name:
            return f"characters (tokenizer {self.tokenizer_name!r} not found locally)"
        return "characters (no tokenizer given)"

    def _tokenizer(self):
        if not self.tried:
            self.tried = True
            if self.tokenizer_name:
                try:
                    from transformers import AutoTokenizer

                    self._tok = AutoTokenizer.from_pretrained(
                        self.tokenizer_name, local_files_only=True
                    )
                except (OSError, ValueError, ImportError):
                    self._tok = None
        return self._tok

    def tokens(self, text: str) -> int | None:
        """Token count of ``text`` with the tokenizer, None without one (a prompt text
        is not turned into characters: a scenario's prompt length is in tokens)."""
        tok = self._tokenizer()
        return len(tok(text, add_special_tokens=False)["input_ids"]) if tok else None

    def _same_kind(self, kind: str, shown: str, field: str, where: str, line: int | None):
        """Record ``field``'s kind (``text``/``number``) at its first value; raise
        GroupedDataError naming ``where`` and the first line when it changes."""
        source = where.split(": line ", 1)[0]  # per file: line numbers are the file's
        first_kind, first_line = self.kinds.setdefault(f"{source}\0{field}", (kind, line))
        if first_kind != kind:
            raise GroupedDataError(
                f"{where}: {shown} where line {first_line} holds a {first_kind}; one field "
                "holds lengths or texts, not both"
            )

    def __call__(self, v, field: str, where: str, line: int | None = None) -> int:
        """The length of ``v`` (the value of ``field`` at ``where``, file line ``line``).
        Raises GroupedDataError naming ``where``: a text in a :data:`COUNT_FIELDS` field,
        a field mixing numbers and texts, a number that is not an integer >= 1, or one
        above :data:`MAX_LENGTH`."""
        if isinstance(v, str):
            if field in COUNT_FIELDS:
                raise GroupedDataError(
                    f"{where}: {v!r} is a text; a length field holds numbers (write 100, "
                    'not "100"), or name the responses\' text field with --lengths-field'
                )
            self._same_kind("text", "a text", field, where, line)
            self.texts += 1
            tok = self._tokenizer()
            n = len(tok(v, add_special_tokens=False)["input_ids"]) if tok else len(v)
            return max(n, 1)  # an empty response still took one step (EOS)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise GroupedDataError(f"{where}: expected a length or a text, got {v!r}")
        if math.isnan(v) or v < 1:
            raise GroupedDataError(f"{where}: length {v!r} is not an integer >= 1")
        check_bound(v, "length", where)
        if v != int(v):
            raise GroupedDataError(f"{where}: length {v!r} is not an integer >= 1")
        self._same_kind("number", f"a number ({_shown(v)})", field, where, line)
        self.numbers.add(field)
        return int(v)

    def counts_tokens(self, v) -> bool:
        """True when the length of ``v`` is in tokens (a number, or a text with a loaded
        tokenizer), False for a character count (not comparable with a token cap)."""
        return not isinstance(v, str) or self._tokenizer() is not None


def _number(v, where: str) -> float | None:
    """``v`` as a float (None stays None; booleans are 0/1). Raises GroupedDataError
    naming ``where`` on a non-number or NaN."""
    if v is None:
        return None
    if isinstance(v, bool):
        return float(v)
    if not isinstance(v, int | float) or math.isnan(v):
        raise GroupedDataError(f"{where}: expected a number, got {v!r}")
    return float(v)


def _per_sample_values(rec: dict, name: str | None, n: int, where: str, per_prompt: bool):
    """The field's ``n`` per-sample values (a list in a per-prompt record, else broadcast)."""
    if name is None or rec.get(name) is None:
        return [None] * n
    v = rec[name]
    if isinstance(v, list):
        if len(v) != n:
            raise GroupedDataError(f"{where} {name!r}: {len(v)} values for {n} samples")
        return v
    return [v] * n


def columns(path: Path) -> set[str]:
    """Field names of the first 50 records of a JSONL/CSV/parquet file (empty: none)."""
    return set().union(*(r.keys() for _, r in records(path)[:50]))


def read_records(
    path: Path, names: FieldNames, lengths: LengthCounter, need_lengths: bool = True
) -> FileRows:
    """The samples of a JSONL/CSV/parquet file, one dict per sample (:data:`COLUMNS` less
    ``source``, plus ``prompt_text``); see :func:`read_grouped`. ``need_lengths`` False:
    a file with no lengths field (none named, none of the common spellings) is read from
    its reward field (correctness-only files), every ``length`` None.

    Raises :class:`GroupedDataError` naming the file, line and field on the input errors
    of :func:`read_grouped`, including a length above its stated cap (a cap field, or
    ``max_model_len`` less the prompt's tokens): a log cut at the cap cannot hold one."""
    recs = records(path)
    if not recs:
        raise GroupedDataError(f"{path}: no records")
    cols = set().union(*(r.keys() for _, r in recs[:50]))
    where = f"{path}: line {recs[0][0]}"
    f = {
        k: _pick(getattr(names, k), k, cols, where, required=(k == "lengths" and need_lengths))
        for k in CANDIDATES
    }
    if names.prompt is None:
        f["prompt"] = _prompt_id_field(f, recs, cols, where)
        if f["prompt"] in ID_FIELDS:
            refuse_ambiguous_ids(recs, f["prompt"], f["step"], path)
    if f["lengths"] is None:
        return _correctness_only(recs, f, path, where)
    text = _text_field(f["prompt"], recs, cols)
    per_prompt = isinstance(recs[0][1].get(f["lengths"]), list)
    if not per_prompt and f["prompt"] is None:
        raise GroupedDataError(f"{where}: one record per sample needs a prompt field")
    rows = []
    for no, rec in recs:
        at = f"{path}: line {no}: field"
        if f["lengths"] not in rec or rec[f["lengths"]] is None:
            raise GroupedDataError(f"{at} {f['lengths']!r}: missing")
        raw = rec[f["lengths"]]
        vals = raw if per_prompt else [raw]
        if per_prompt and (not isinstance(raw, list) or not raw):
            raise GroupedDataError(f"{at} {f['lengths']!r}: expected a non-empty list")
        ls = [lengths(v, f["lengths"], f"{at} {f['lengths']!r}", no) for v in vals]
        n = len(ls)
        step = _number(rec.get(f["step"]), f"{at} {f['step']!r}") if f["step"] else 0.0
        prompt = rec.get(f["prompt"]) if f["prompt"] else None
        prompt = str(prompt) if prompt is not None else f"row{no}"
        pt = rec.get(f["prompt_tokens"]) if f["prompt_tokens"] else None
        if isinstance(pt, str):  # prompt text (verl's dumps): tokens only with a tokenizer
            pt = lengths.tokens(pt)
        pt = _number(pt, f"{at} {f['prompt_tokens']!r}")
        if pt is not None:
            check_bound(pt, "prompt length", f"{at} {f['prompt_tokens']!r}")
        extra = {
            k: _per_sample_values(rec, f[k], n, f"{at}", per_prompt)
            for k in ("reward", "cap", "finish_reason", "sample")
        }
        prompt_text = rec.get(text) if text else None
        for j, length in enumerate(ls):
            cap = _number(extra["cap"][j], f"{at} {f['cap']!r}")
            if cap is not None:
                check_bound(cap, "cap", f"{at} {f['cap']!r}")
            if cap is not None and f["cap"] == "max_model_len" and pt is not None:
                cap -= pt
            if cap is not None and length > cap and lengths.counts_tokens(vals[j]):
                raise GroupedDataError(
                    f"{at} {f['lengths']!r}: length {length} above the response cap "
                    f"{cap:g} (field {f['cap']!r}); a log cut at its cap cannot hold one"
                )
            fin = extra["finish_reason"][j]
            censored = fin == "length" or (cap is not None and length >= cap)
            if fin == "length" and cap is None:
                cap = length
            sample = _number(extra["sample"][j], f"{at} {f['sample']!r}")
            rows.append(
                {
                    "line": no,
                    "step": int(step or 0),
                    "prompt": prompt,
                    "sample_idx": j if sample is None else int(sample),
                    "length": min(length, int(cap)) if cap is not None and cap >= 1 else length,
                    "censored": bool(censored),
                    "cap": None if cap is None else int(cap),
                    "reward": _number(extra["reward"][j], f"{at} {f['reward']!r}"),
                    "prompt_tokens": None if pt is None else int(pt),
                    "prompt_text": prompt_text if isinstance(prompt_text, str) else None,
                }
            )
    return FileRows(rows, f, per_prompt, text)


def _text_field(id_field: str | None, recs: list, cols: set) -> str | None:
    """A field holding the prompt's text beside the id field ``id_field`` (the first of
    :data:`TEXT_FIELDS` present whose first value is a string), or None."""
    for c in TEXT_FIELDS:
        if c in cols and c != id_field:
            value = next((r[c] for _, r in recs if r.get(c) is not None), None)
            if isinstance(value, str):
                return c if id_field is not None else None
    return None


def _prompt_id_field(f: dict, recs: list, cols: set, where: str) -> str | None:
    """The field that names a record's prompt when none was named: the first candidate
    whose values are ids or texts. A candidate holding numbers that is also the file's
    prompt-length field (``input`` in some logs is the prompt's token count) is a length,
    never a prompt identity: the next candidate is taken, and with none the file is
    refused (GroupedDataError naming the line and field): equal lengths would merge
    different prompts into one group."""
    chosen = f["prompt"]
    if chosen is None or chosen != f["prompt_tokens"]:
        return chosen
    value = next((r[chosen] for _, r in recs if r.get(chosen) is not None), None)
    if isinstance(value, str):
        return chosen  # prompt text: an identity (and, tokenized, a length)
    others = [c for c in CANDIDATES["prompt"] if c in cols and c != chosen]
    if others:
        return others[0]
    raise GroupedDataError(
        f"{where}: field {chosen!r} holds numbers (the prompt's token count), not a prompt "
        "id, and no id field was found; name the prompt's id with --prompt-field"
    )


def _correctness_only(recs, f: dict, path: Path, where: str) -> FileRows:
    """Rows of a file with no lengths field: the reward field gives the samples (a list
    per prompt, or one value per sample record); lengths, caps and prompt tokens None."""
    if f["reward"] is None:
        raise GroupedDataError(
            f"{where}: no lengths field and no reward field (tried {', '.join(CANDIDATES['reward'])})"
        )
    per_prompt = isinstance(recs[0][1].get(f["reward"]), list)
    if not per_prompt and f["prompt"] is None:
        raise GroupedDataError(f"{where}: one record per sample needs a prompt field")
    rows = []
    for no, rec in recs:
        at = f"{path}: line {no}: field {f['reward']!r}"
        raw = rec.get(f["reward"])
        if raw is None:
            raise GroupedDataError(f"{path}: line {no}: no correctness field {f['reward']!r}")
        if per_prompt and (not isinstance(raw, list) or not raw):
            raise GroupedDataError(f"{at}: expected a non-empty list")
        vals = raw if per_prompt else [raw]
        step = (
            _number(rec.get(f["step"]), f"{path}: line {no}: field {f['step']!r}")
            if f["step"]
            else 0.0
        )
        prompt = rec.get(f["prompt"]) if f["prompt"] else None
        sample = _per_sample_values(
            rec, f["sample"], len(vals), f"{path}: line {no}: field", per_prompt
        )
        for j, v in enumerate(vals):
            s = _number(sample[j], f"{path}: line {no}: field {f['sample']!r}")
            rows.append(
                {
                    "line": no,
                    "step": int(step or 0),
                    "prompt": str(prompt) if prompt is not None else f"row{no}",
                    "sample_idx": j if s is None else int(s),
                    "length": None,
                    "censored": False,
                    "cap": None,
                    "reward": _number(v, at),
                    "prompt_tokens": None,
                }
            )
    return FileRows(rows, f, per_prompt)
