"""The trace: one row per rollout and one per learner step, for simulated and real runs
alike (DESIGN.md, "Trace schema"), and every metric computed from it.

Interface: :func:`validate`, :func:`read`, :func:`write_parquet`, :func:`frame`,
:func:`concat` and :class:`TraceError` (the schema, :mod:`.schema`); :class:`TraceWriter`,
:func:`append_durably` and :func:`truncate_jsonl` (per-step JSONL, appended and flushed,
:mod:`.jsonl`); :class:`RolloutSink` (:mod:`.stream`); the metrics of ``docs/metrics.md``
(:mod:`.metrics`); strict JSON (:mod:`.strict_json`); field checks (:mod:`.field_checks`).
"""

from rolloutlab.sim import lazy_exports

_INTERFACE = {
    "TraceError": "schema",
    "validate": "schema",
    "read": "schema",
    "write_parquet": "schema",
    "frame": "schema",
    "concat": "schema",
    "empty": "schema",
    "TraceWriter": "jsonl",
    "append_durably": "jsonl",
    "truncate_jsonl": "jsonl",
    "RolloutSink": "stream",
    "DEFAULT_TAU": "metrics",
    "straggler_ratio": "metrics",
    "group_straggler_ratio": "metrics",
    "straggler_event": "metrics",
    "slot_idle_fraction": "metrics",
    "step_metrics": "metrics",
    "staleness": "metrics",
    "run_summary": "metrics",
    "pipeline_summary": "metrics",
    "learner_idle_fraction": "metrics",
    "generator_idle_fraction": "metrics",
    "dumps": "strict_json",
    "loads": "strict_json",
    "write_json": "strict_json",
    "write_atomic": "strict_json",
}
"""Exported name -> the module of this package that defines it."""

__all__ = sorted(_INTERFACE)
__getattr__, __dir__ = lazy_exports(__name__, _INTERFACE)
