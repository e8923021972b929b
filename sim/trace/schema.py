"""The rollout trace and step trace: schema, validation, reading and writing.

One row per rollout and one row per learner step, as in docs/DESIGN.md ("Trace schema").
The simulator and the real runners write exactly these tables, so every metric in
:mod:`sim.trace.metrics` is computed by one function from either source.

Files: parquet (``rollouts.parquet``, ``steps.parquet``) carry the schema version in
their key-value metadata under ``rolloutlab.schema_version``; JSONL (one JSON object a
line, what a live run appends and flushes every step) is accepted too. Validation on
read turns a missing column, a negative length or time, or a finish before its submit
into a :class:`TraceError` naming the file, the row and the column; nothing is dropped
silently.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import polars as pl
from rolloutlab.sim.trace import strict_json

SCHEMA_VERSION = 3
"""Bumped whenever a column is added, removed or changes meaning. Version 2 added the
nullable reward columns (:data:`V2_COLUMNS`), version 3 the nullable per-rollout version
and would-be-length columns of the asynchronous pipelines (:data:`V3_COLUMNS`); older
files are still read, the columns they lack filled with nulls."""

READABLE_VERSIONS = (1, 2, 3)
"""Schema versions :func:`read` accepts."""

META_KEY = b"rolloutlab.schema_version"

ROLLOUT_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String,
    "step": pl.Int64,  # learner step that consumed (sync) or will consume the rollout
    "prompt_id": pl.Int64,
    "sample_idx": pl.Int64,  # index within the prompt's group, 0..G-1
    "group_size": pl.Int64,  # G of that group
    "policy_version": pl.Int64,  # weights version that generated it (last token)
    "learner_version": pl.Int64,  # learner version when consumed
    "prompt_tokens": pl.Int64,
    "response_tokens": pl.Int64,  # EOS included, prompt excluded
    "finish_reason": pl.String,  # "stop" | "length" | "abort" | "tool_timeout"
    "worker": pl.Int64,  # generation worker (engine replica) index
    "t_submit": pl.Float64,  # s from run start
    "t_first_token": pl.Float64,  # s from run start
    "t_finish": pl.Float64,  # s from run start
    "reward": pl.Float64,  # v2, nullable: the rollout's reward (0/1 for verifiable tasks)
    "correct": pl.Boolean,  # v2, nullable: verifier says the answer is correct
    # v3, all nullable (simulator: asynchronous pipelines; docs/pipelines.md):
    "would_be_response_tokens": pl.Int64,  # length had it run to the end (aborted: > tokens)
    "version_dispatch": pl.Int64,  # v_gen when the request was dispatched
    "version_first_token": pl.Int64,  # weights version that made its first token
    "version_last_token": pl.Int64,  # weights version that made its last token
    "stale_tokens": pl.Int64,  # tokens made under a version older than version_last_token
}

STEP_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String,
    "step": pl.Int64,
    "t_start": pl.Float64,  # s from run start: first rollout request of the step
    "t_end": pl.Float64,  # s from run start: weights synced, step done
    "gen_time": pl.Float64,  # s, generation phase (verl timing_s/gen)
    "train_time": pl.Float64,  # s, learner: log-prob passes + update (verl timing_s/old_log_prob + ref + update_actor)
    "sync_time": pl.Float64,  # s, weight sync to the generators
    "lr": pl.Float64,
    "reward_mean": pl.Float64,  # null in the simulator without a pass-rate model
    "kl": pl.Float64,
    "grad_norm": pl.Float64,
    "grad_cosine": pl.Float64,  # cosine of this update with the previous one
    "controller_state": pl.String,  # JSON of the controller's state_dict after observe
    # v2, all nullable (docs/metrics.md, docs/dynamic_sampling.md):
    "informative_groups": pl.Int64,  # trained groups whose rewards are not all equal
    "informative_frac": pl.Float64,  # informative_groups / trained groups
    "gen_rounds": pl.Int64,  # generation rounds of the step (dynamic sampling)
    "generated_groups": pl.Int64,  # groups generated for the step, kept or filtered
    "kept_groups": pl.Int64,  # groups trained on
    "wasted_rollout_s": pl.Float64,  # sum of t_finish - t_submit over filtered groups' rollouts
    "dynamic_sampling_abort": pl.Boolean,  # max_gen_batches reached with < B kept
    # optional, nullable (docs/pipelines.md "Weight-sync modes"): sync_time split in three
    "sync_pause_s": pl.Float64,  # s, generators reaching an iteration boundary
    "sync_drain_s": pl.Float64,  # s, waiting for in-flight rollouts to finish (drain mode)
    "sync_transfer_s": pl.Float64,  # s, sending the weights (cost.weight_sync_s)
    # optional, nullable (docs/controllers.md "Reasons"): JSON of controller.explain()
    "controller_reason": pl.String,
    # optional, nullable (sim.trace.metrics.with_cut_columns): what an over-provisioning pipeline cut
    "cut_rollouts": pl.Int64,  # rollouts of the step aborted (tail cut or stale drop)
    "cut_tokens": pl.Int64,  # tokens generated by them
    "cut_len_bias": pl.Float64,  # mean consumed length / mean would-be length generated
    # optional, nullable (sim.pipelines.long_round): tail batching's route=F
    "routed_prompts": pl.Int64,  # prompts routed to the long round while the step ran
    "route_reason": pl.String,  # JSON: F and each routed prompt's n, mean, threshold
    # optional, nullable (sim.models.step_phases): null without step phases
    "reward_wait_s": pl.Float64,  # s, rewards not hidden by the learner + advantage (verl timing_s/adv)
    "periodic_s": pl.Float64,  # s, validation and checkpoint run on this step
}

V2_COLUMNS: dict[str, tuple[str, ...]] = {
    "rollouts": ("reward", "correct"),
    "steps": (
        "informative_groups",
        "informative_frac",
        "gen_rounds",
        "generated_groups",
        "kept_groups",
        "wasted_rollout_s",
        "dynamic_sampling_abort",
        "sync_pause_s",
        "sync_drain_s",
        "sync_transfer_s",
        "controller_reason",
        "cut_rollouts",
        "cut_tokens",
        "cut_len_bias",
        "routed_prompts",
        "route_reason",
        "reward_wait_s",
        "periodic_s",
    ),
}
"""Columns added by schema version 2 (nullable): a table without them (a version-1 file)
gets them as nulls on read. The ``sync_*_s`` split of ``sync_time`` came later, still
optional and nullable, so no version bump: older version-2 files read with nulls."""

V3_COLUMNS: dict[str, tuple[str, ...]] = {
    "rollouts": (
        "would_be_response_tokens",
        "version_dispatch",
        "version_first_token",
        "version_last_token",
        "stale_tokens",
    ),
    "steps": (),
}
"""Columns added by schema version 3 (nullable, filled by the asynchronous pipelines of
the simulator; null in synchronous and real traces); older tables get them as nulls."""

NULLABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    k: V2_COLUMNS[k] + V3_COLUMNS[k] for k in ("rollouts", "steps")
}
"""Every column a table may lack (filled with nulls on read)."""

FINISH_REASONS = ("stop", "length", "abort", "tool_timeout")  # the last: docs/multi_turn.md
_NON_NEGATIVE = {
    "rollouts": (
        "step",
        "prompt_id",
        "sample_idx",
        "group_size",
        "prompt_tokens",
        "response_tokens",
        "worker",
        "t_submit",
        "t_first_token",
        "t_finish",
        "policy_version",
        "learner_version",
    ),
    "steps": ("step", "t_start", "t_end", "gen_time", "train_time", "sync_time"),
}


class TraceError(ValueError):
    """Bad trace input. The message names the file, the row (0-based) and the column."""


def _schema_for(kind: str) -> dict[str, pl.DataType]:
    if kind == "rollouts":
        return ROLLOUT_SCHEMA
    if kind == "steps":
        return STEP_SCHEMA
    raise ValueError(f"unknown trace kind {kind!r}; expected 'rollouts' or 'steps'")


def _first_bad_row(mask: pl.Series) -> int | None:
    idx = mask.fill_null(False).arg_true()
    return int(idx[0]) if len(idx) else None


def validate(df: pl.DataFrame, kind: str, source: str = "<memory>") -> pl.DataFrame:
    """Check ``df`` against the ``kind`` schema and return it cast to the schema types.

    Args:
        df: a rollout table (``kind="rollouts"``) or step table (``kind="steps"``).
        source: file name used in error messages.
    Returns: the table with exactly the schema's columns, in schema order.
    Raises:
        TraceError: a missing column, a value that cannot be cast, a null where a
            value is required, a negative length/time/index, an unknown
            ``finish_reason``, or ``t_finish < t_submit`` / ``t_first_token`` outside
            ``[t_submit, t_finish]`` / ``t_end < t_start``; the message names
            ``source``, the first offending row and the column.
    """
    schema = _schema_for(kind)
    df = with_v2_columns(df, kind)
    missing = [c for c in schema if c not in df.columns]
    if missing:
        raise TraceError(
            f"{source}: {kind} table is missing column(s) {missing}; found {df.columns}"
        )
    cols = []
    for name, dtype in schema.items():
        s = df.get_column(name)
        try:
            cols.append(s.cast(dtype, strict=True))
        except Exception as exc:  # polars raises several types on a bad cast
            raise TraceError(
                f"{source}: column {name!r} cannot be read as {dtype}: {exc}"
            ) from None
    out = pl.DataFrame(cols)
    required = [
        c
        for c in schema
        if (kind == "rollouts" and c not in NULLABLE_COLUMNS[kind])
        or c in ("run_id", "step", "t_start", "t_end")
    ]
    for name in required:
        row = _first_bad_row(out.get_column(name).is_null())
        if row is not None:
            raise TraceError(f"{source}: row {row}, column {name!r}: value is missing")
    for name in _NON_NEGATIVE[kind]:
        col = out.get_column(name)
        bad = col < 0
        if col.dtype == pl.Float64:
            bad = bad | col.is_nan()
        row = _first_bad_row(bad)
        if row is not None:
            raise TraceError(
                f"{source}: row {row}, column {name!r}: expected a non-negative "
                f"number, found {col[row]}"
            )
    if kind == "rollouts":
        _check_rollout_order(out, source)
    else:
        row = _first_bad_row(out["t_end"] < out["t_start"])
        if row is not None:
            raise TraceError(
                f"{source}: row {row}, column 't_end': {out['t_end'][row]} "
                f"is before t_start {out['t_start'][row]}"
            )
    return out


def _check_rollout_order(out: pl.DataFrame, source: str) -> None:
    row = _first_bad_row(~out["finish_reason"].is_in(FINISH_REASONS))
    if row is not None:
        raise TraceError(
            f"{source}: row {row}, column 'finish_reason': expected one of "
            f"{FINISH_REASONS}, found {out['finish_reason'][row]!r}"
        )
    checks = [
        ("t_finish", out["t_finish"] < out["t_submit"], "is before t_submit"),
        ("t_first_token", out["t_first_token"] < out["t_submit"], "is before t_submit"),
        ("t_first_token", out["t_first_token"] > out["t_finish"], "is after t_finish"),
        ("sample_idx", out["sample_idx"] >= out["group_size"], "is not below group_size"),
    ]
    for col, mask, what in checks:
        row = _first_bad_row(mask)
        if row is not None:
            raise TraceError(f"{source}: row {row}, column {col!r}: {out[col][row]} {what}")


def with_v2_columns(df: pl.DataFrame, kind: str) -> pl.DataFrame:
    """``df`` with the nullable columns it lacks (:data:`NULLABLE_COLUMNS`: those of
    versions 2 and 3) added as nulls of their schema type (an older table read by this
    version, or a table of a pipeline that does not fill them)."""
    schema = _schema_for(kind)
    add = [
        pl.lit(None, dtype=schema[c]).alias(c)
        for c in NULLABLE_COLUMNS[kind]
        if c not in df.columns
    ]
    return df.with_columns(add) if add else df


def frame(columns: dict, kind: str) -> pl.DataFrame:
    """A ``kind`` table from a dict of equal-length columns (arrays or lists) named as in
    the schema; version-2 columns that are absent become nulls; columns come out in
    schema order and types (no validation: :func:`validate`). Raises KeyError naming a
    missing version-1 column."""
    schema = _schema_for(kind)
    present = {k: schema[k] for k in schema if k in columns}
    df = pl.DataFrame({k: columns[k] for k in present}, schema=present)
    return with_v2_columns(df, kind).select(list(schema))


def empty(kind: str) -> pl.DataFrame:
    """An empty table of the ``kind`` schema ("rollouts" or "steps")."""
    return pl.DataFrame(schema=_schema_for(kind))


def write_parquet(df: pl.DataFrame, path: str | os.PathLike, kind: str) -> None:
    """Validate and write ``df`` to ``path`` atomically (temp file + rename).

    The schema version goes into the parquet metadata. Raises :class:`TraceError`
    on invalid rows (nothing is written then).
    """
    path = Path(path)
    table = with_schema_metadata(validate(df, kind, str(path)).to_arrow(), kind)
    tmp = path.with_name(path.name + ".tmp")
    import pyarrow.parquet as pq  # why: at call, not import (~55 ms of every CLI start)

    pq.write_table(table, tmp)
    os.replace(tmp, path)


def with_schema_metadata(table, kind: str):
    """``table`` (a ``pyarrow.Table``) with the schema version and ``kind`` in its schema's
    key-value metadata, as every trace parquet file carries them."""
    meta = dict(table.schema.metadata or {})
    meta[META_KEY] = str(SCHEMA_VERSION).encode()
    meta[b"rolloutlab.kind"] = kind.encode()
    return table.replace_schema_metadata(meta)


def read(path: str | os.PathLike, kind: str) -> pl.DataFrame:
    """Read and validate a ``kind`` trace from parquet or JSONL (by suffix).

    Raises:
        TraceError: the file is missing, unreadable, of another schema version,
            or holds an invalid row (see :func:`validate`).
    """
    path = Path(path)
    if not path.exists():
        raise TraceError(f"{path}: no such trace file")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq  # why: as in write_parquet

        try:
            table = pq.read_table(path)
        except Exception as exc:
            raise TraceError(f"{path}: not a readable parquet file: {exc}") from None
        meta = table.schema.metadata or {}
        version = meta.get(META_KEY)
        if version is not None and int(version) not in READABLE_VERSIONS:
            raise TraceError(
                f"{path}: trace schema version {int(version)}, this rolloutlab "
                f"reads versions {', '.join(map(str, READABLE_VERSIONS))}"
            )
        df = pl.from_arrow(table)
    elif path.suffix in (".jsonl", ".ndjson"):
        df = _read_jsonl(path, kind)
    else:
        raise TraceError(f"{path}: unknown trace format; expected .parquet or .jsonl")
    return validate(df, kind, str(path))


def _read_jsonl(path: Path, kind: str) -> pl.DataFrame:
    rows = []
    with open(path) as fh:
        for lineno, line in enumerate(fh):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise TraceError(strict_json.jsonl_error(path, lineno + 1, exc)) from None
    if not rows:
        return empty(kind)
    versions = {r.pop("schema_version", SCHEMA_VERSION) for r in rows}
    if not versions <= set(READABLE_VERSIONS):
        raise TraceError(
            f"{path}: trace schema version(s) {sorted(versions)}, this rolloutlab "
            f"reads versions {', '.join(map(str, READABLE_VERSIONS))}"
        )
    return pl.DataFrame(rows, infer_schema_length=None)


def concat(frames: Iterable[pl.DataFrame], kind: str) -> pl.DataFrame:
    """Concatenate tables of one kind (an empty table when there are none)."""
    frames = list(frames)
    return pl.concat(frames, how="vertical") if frames else empty(kind)
