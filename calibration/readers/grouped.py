"""Read grouped per-sample files: every response length of every group, step by step.

Layouts (chosen per file from its first record):

* one record per prompt per step, the lengths field a list (``{"step": 3, "prompt_id":
  7, "response_lengths": [412, 95, ...], "score": [1, 0, ...]}``; Qwen2.5-Math's
  ``math_cot_100.jsonl`` with its ``response`` texts and ``score`` booleans);
* one record per sample (``{"step": 3, "prompt_id": 7, "response_length": 412, ...}``);
* verl's rollout dumps (``trainer.rollout_data_dir``: ``{step}.jsonl``, one record per
  sample ``{"input": prompt text, "output": response text, "score": .., "step": ..}``):
  grouped by the prompt text; a prompt sampled twice in one step merges into one group;
* group-per-line length logs (``packed_lengths_step_{N}.jsonl``, one file per step,
  one line per group: ``output`` the group's lengths, ``input`` the prompt's tokens,
  ``local_index`` the prompt within a rank; :mod:`calibration.readers.packed_lengths`),
  read as written, a file or a folder of them;
* the project's own rollout trace (``rollouts.parquet``/``rollouts.jsonl``, schema
  :data:`sim.trace.schema.ROLLOUT_SCHEMA`), read with :func:`sim.trace.schema.read` (aborted rollouts
  left out; ``finish_reason == "length"`` is a censored length).

Formats: JSONL (``.jsonl``/``.json``), CSV (a list cell as JSON text, ``"[412, 95]"``) and
parquet. Field names are configurable (:class:`FieldNames`); a field left ``None`` is
looked up among :data:`CANDIDATES` (the common spellings). Text responses become lengths
with a Hugging Face tokenizer when one is given and found locally (never downloaded),
else character counts; :attr:`GroupedTrace.length_unit` says which.

Censoring: a sample is right-censored at its cap when a finish-reason field says
``length`` or a cap field is given and the length reaches it. A cap field named
``max_model_len`` caps prompt + response (a per-prompt ``max_model_len`` truncates
without raising verl's clip ratio), so the response cap is ``max_model_len -
prompt_tokens``; any other cap field caps the response. A ``length`` finish without a
cap field puts the cap at the length itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np
import polars as pl
from rolloutlab.calibration.readers.grouped_checks import refuse_repeats, refuse_reused_ids
from rolloutlab.calibration.readers.grouped_records import (
    CANDIDATES,
    TEXT_FIELDS,
    FieldNames,
    GroupedDataError,
    LengthCounter,
    read_records,
)
from rolloutlab.calibration.readers.packed_lengths import packed_files, packed_step, read_packed
from rolloutlab.sim.trace import schema as sim_trace

__all__ = [
    "CANDIDATES",
    "TEXT_FIELDS",
    "FieldNames",
    "GroupedDataError",
    "GroupedTrace",
    "read_grouped",
]


COLUMNS = "source, line, step, prompt, sample_idx, length, censored, cap, reward, prompt_tokens"


@dataclass(frozen=True)
class GroupedTrace:
    """Samples of grouped files: ``samples`` has one row per response, columns
    ``source`` (file), ``line`` (1-based line, or row + 1), ``step`` (Int64; 0 when the
    file has no step field), ``prompt`` (String key), ``sample_idx`` (Int64),
    ``length`` (Int64 >= 1), ``censored`` (Boolean), ``cap`` (Int64, null = unknown),
    ``reward`` (Float64, null = none), ``prompt_tokens`` (Int64, null = none)."""

    samples: pl.DataFrame
    length_unit: str
    """``"tokens"``, ``"tokens (tokenizer NAME)"`` or ``"characters ..."``."""

    def steps(self) -> list[int]:
        """Distinct steps, ascending."""
        return sorted(self.samples["step"].unique().to_list())

    def groups(self, field: str = "length") -> list[list[np.ndarray]]:
        """Per step (ascending), one ``(G_i,)`` array of ``field`` per prompt, in order of
        ``sample_idx``, prompts in file order (``field``: ``length``, ``censored``, ``reward`` ...)."""
        out = []
        df = self.samples.sort("step", "sample_idx", maintain_order=True)  # prompts in file order
        for _, step_df in df.group_by("step", maintain_order=True):
            out.append(
                [g[field].to_numpy() for _, g in step_df.group_by("prompt", maintain_order=True)]
            )
        return out

    def group_sizes(self) -> str | None:
        """One line on unequal group sizes (a prompt sampled in several rounds, filtered
        samples, dynamic-sampling regeneration), e.g. ``"group sizes 3-4: 12 of 24 groups
        smaller than their step's largest"``; None when every group of every step has
        the same size."""
        sizes = self.samples.group_by("step", "prompt").len()
        sizes = sizes.with_columns(pl.col("len").max().over("step").alias("step_max"))
        short = int((sizes["len"] < sizes["step_max"]).sum())
        lo, hi = int(sizes["len"].min()), int(sizes["len"].max())
        if lo == hi:
            return None
        return (
            f"group sizes {lo}-{hi}: {short} of {sizes.height} groups smaller than their "
            "step's largest"
        )

    def flat(self, field: str = "length", steps: int | None = None) -> list[np.ndarray]:
        """:meth:`groups` of the first ``steps`` steps (None: all), as one flat list."""
        return [g for s in self.groups(field)[:steps] for g in s]

    def group_steps(self, steps: int | None = None) -> list[int]:
        """The step of every group of :meth:`flat` (same order)."""
        per_step = self.groups("length")[:steps]
        return [t for t, gs in zip(self.steps(), per_step, strict=False) for _ in gs]

    def known_cap(self) -> int | None:
        """The largest response cap in the data (cap fields, ``length`` finishes), or None."""
        caps = self.samples["cap"].drop_nulls()
        return int(caps.max()) if caps.len() else None

    def has_rewards(self) -> bool:
        """True when every sample has a reward."""
        return self.samples["reward"].null_count() == 0

    def group_size(self) -> int:
        """The one group size G of every (step, prompt). Raises: GroupedDataError naming
        the file, line, step and prompt of the first group of another size."""
        sizes = self.samples.group_by("step", "prompt", maintain_order=True).agg(
            pl.len().alias("n"), pl.col("source").first(), pl.col("line").first()
        )
        G = int(sizes["n"].mode().sort()[-1])
        bad = sizes.filter(pl.col("n") != G)
        if bad.height:
            r = bad.row(0, named=True)
            raise GroupedDataError(
                f"{r['source']}: line {r['line']}: field 'lengths': step {r['step']} prompt "
                f"{r['prompt']!r} has {r['n']} samples, the other groups {G} (equal G needed)"
            )
        return G

    def check_cap(self, cap: int | None, option: str = "--max-response-length") -> None:
        """Raise GroupedDataError naming the file, line and field of the first length above
        the stated ``cap`` (None: nothing to check); character counts are not checked
        against a cap in tokens."""
        if cap is None or self.length_unit.startswith("characters"):
            return
        above = self.samples.filter(pl.col("length") > cap)
        if above.height:
            r = above.row(0, named=True)
            raise GroupedDataError(
                f"{r['source']}: line {r['line']}: field 'length': length {r['length']} above "
                f"the response cap {cap} of {option}"
            )

    def censored_at(self, cap: int | None) -> GroupedTrace:
        """This trace with every length at the stated response ``cap`` censored there (a
        log clipped at its cap without a cap or finish-reason field: a length equal to
        the cap only says the response would have been at least that long); ``cap``
        None, or lengths in characters (not comparable with a cap in tokens): unchanged.
        Lengths above the cap are :meth:`check_cap`'s refusal, not censoring."""
        if cap is None or self.length_unit.startswith("characters"):
            return self
        hit = pl.col("length") >= cap
        samples = self.samples.with_columns(
            (pl.col("censored") | hit).alias("censored"),
            pl.when(hit).then(pl.lit(cap, pl.Int64)).otherwise(pl.col("cap")).alias("cap"),
        )
        return replace(self, samples=samples)

    def typical_group_size(self) -> int:
        """The most common group size over every (step, prompt) (the larger on a tie): the
        logged ``G`` of a trace whose groups may differ in size (``compare groups``
        measures G up to it on the groups that hold that many samples)."""
        sizes = self.samples.group_by("step", "prompt").len()["len"]
        counts = sizes.value_counts(sort=True)
        top = counts["count"].max()
        return int(counts.filter(pl.col("count") == top)["len"].max())

    def matrix(self, step: int, field: str = "length") -> np.ndarray:
        """``(B, G)`` array of ``field`` at ``step`` (needs equal G, :meth:`group_size`)."""
        self.group_size()
        i = self.steps().index(step)
        return np.stack(self.groups(field)[i])


def _read_rollouts(path: Path) -> pl.DataFrame:
    """The project's own rollout trace as :data:`COLUMNS` rows (aborts left out)."""
    try:
        df = sim_trace.read(path, "rollouts")
    except sim_trace.TraceError as exc:
        raise GroupedDataError(str(exc)) from None
    df = df.with_row_index("line", offset=1).filter(pl.col("finish_reason") != "abort")
    length_hit = pl.col("finish_reason") == "length"
    return df.select(
        pl.col("line").cast(pl.Int64),
        "step",
        pl.col("prompt_id").cast(pl.String).alias("prompt"),
        "sample_idx",
        pl.col("response_tokens").clip(lower_bound=1).alias("length"),
        length_hit.alias("censored"),
        pl.when(length_hit).then(pl.col("response_tokens")).alias("cap"),
        (pl.col("reward") if "reward" in df.columns else pl.lit(None)).alias("reward"),
        "prompt_tokens",
    )


def is_rollout_trace(path: Path) -> bool:
    """True for the project's own ``rollouts.parquet`` / ``rollouts.jsonl``."""
    return path.name.startswith("rollouts") and path.suffix in (".parquet", ".jsonl")


_SCHEMA = {
    "source": pl.String,
    "line": pl.Int64,
    "step": pl.Int64,
    "prompt": pl.String,
    "sample_idx": pl.Int64,
    "length": pl.Int64,
    "censored": pl.Boolean,
    "cap": pl.Int64,
    "reward": pl.Float64,
    "prompt_tokens": pl.Int64,
}


DUMP_FILE = re.compile(r"^(\d+)\.jsonl$")
"""A file of verl's rollout dump folder (``trainer.rollout_data_dir``): ``{step}.jsonl``."""


def files_of(path: Path) -> list[Path]:
    """The files one path argument stands for: the file itself, a run folder's
    ``rollouts.parquet``, the ``{step}.jsonl`` files of a verl rollout dump folder or the
    ``packed_lengths_step_{N}.jsonl`` files of a group-per-line log folder, in step order.
    Raises GroupedDataError naming the path when none applies."""
    if path.is_dir():
        if (path / "rollouts.parquet").is_file():
            return [path / "rollouts.parquet"]
        if packed := packed_files(path):
            return packed
        dump = sorted(
            (int(m.group(1)), f) for f in path.iterdir() if (m := DUMP_FILE.match(f.name))
        )
        if dump:
            return [f for _, f in dump]
        raise GroupedDataError(
            f"{path}: a folder without rollouts.parquet, {{step}}.jsonl rollout dumps or "
            "packed_lengths_step_N.jsonl logs; give a per-sample file (.jsonl, .csv, .parquet), "
            "a run folder holding rollouts.parquet, a verl trainer.rollout_data_dir or a "
            "folder of packed_lengths_step_N.jsonl files"
        )
    if not path.is_file():
        raise GroupedDataError(f"{path}: no such file")
    return [path]


def _read_log(path: Path, names: FieldNames, counter: LengthCounter, need_lengths: bool):
    """:func:`read_records` of one log file, its samples numbered in file order when it
    has no sample index. A verl dump file (``{step}.jsonl``) must hold samples, each of
    that step (GroupedDataError naming the file, line and field otherwise)."""
    dump = DUMP_FILE.match(path.name)
    if dump and path.stat().st_size == 0:
        raise GroupedDataError(
            f"{path}: line 1: field 'step': step {dump.group(1)} has no samples (an empty "
            "rollout dump)"
        )
    got = read_records(path, names, counter, need_lengths)
    step_field = got.fields.get("step")
    if dump and step_field:
        off = next((r for r in got.rows if r["step"] != int(dump.group(1))), None)
        if off is not None:
            raise GroupedDataError(
                f"{path}: line {off['line']}: field {step_field!r}: step {off['step']} in "
                f"the dump file of step {dump.group(1)}"
            )
    got.rows = refuse_repeats(got.rows, path, got.fields, got.per_prompt)
    keys = [(r["step"], r["prompt"], r["sample_idx"]) for r in got.rows]
    if len(set(keys)) < len(keys):  # per-sample records without a sample index
        seen: dict = {}
        for r in got.rows:
            key = (r["step"], r["prompt"])
            r["sample_idx"] = seen[key] = seen.get(key, -1) + 1
    return got


def read_grouped(
    paths: list[str | Path],
    names: FieldNames | None = None,
    tokenizer: str | None = None,
    need_lengths: bool = True,
) -> GroupedTrace:
    """Read grouped per-sample files (module docstring) into one :class:`GroupedTrace`.

    Files are concatenated; prompts of different files are kept apart (the key is
    prefixed with the file index when more than one file is given). A run directory
    holding ``rollouts.parquet`` may be given for the file. ``need_lengths`` False
    accepts a file with no lengths field (correctness only, the pass-rate fit): its
    samples come from the reward field and their ``length`` is null.

    A verl rollout dump folder (``trainer.rollout_data_dir``, one ``{step}.jsonl`` per
    step) is one argument: its files are one run. When the prompt id is not a text and a
    text field (:data:`TEXT_FIELDS`) is present, each id must name one text over every
    step of the argument (:func:`calibration.readers.grouped_checks.refuse_reused_ids`).

    Raises: GroupedDataError (file, line, field) on a missing file, a folder without
    ``rollouts.parquet`` or dump files, an empty dump file or one holding another step,
    a prompt id naming two texts, a length above its cap, a missing length field,
    invalid JSON, a length that is negative, zero, NaN or not an integer, a non-numeric
    step/reward/cap, or a per-prompt list of the wrong size.
    """
    names = names or FieldNames()
    frames, counter = [], LengthCounter(tokenizer)
    for i, p in enumerate(paths):
        parts, checks = [], None
        for path in files_of(Path(p)):
            if is_rollout_trace(path):
                df = _read_rollouts(path)
            elif packed_step(path) is not None:
                df = pl.DataFrame(read_packed(path)[0], schema_overrides=_SCHEMA)
            else:
                got = _read_log(path, names, counter, need_lengths)
                df, checks = (
                    pl.DataFrame(got.rows, schema_overrides=_SCHEMA | {"prompt_text": pl.String}),
                    checks or got,
                )
            parts.append(df.with_columns(pl.lit(str(path)).alias("source")))
        df = pl.concat(parts, how="diagonal_relaxed")
        if checks is not None and checks.text_field is not None:
            refuse_reused_ids(df, checks.fields["prompt"], checks.text_field)
        if len(paths) > 1:
            df = df.with_columns((pl.lit(f"{i}:") + pl.col("prompt")).alias("prompt"))
        frames.append(df)
    cols = list(_SCHEMA)
    samples = pl.concat(
        [f.cast({c: t for c, t in _SCHEMA.items() if c in f.columns}).select(cols) for f in frames]
    )
    return GroupedTrace(samples=samples, length_unit=counter.unit())


FIELD_OPTIONS = [f.name for f in fields(FieldNames)]
"""The :class:`FieldNames` fields (``--<name>-field`` on the command line)."""
