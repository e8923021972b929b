"""The trace: one row per rollout and one per learner step, for simulated and real runs
alike (DESIGN.md, "Trace schema"), and every metric computed from it.

Interface: :func:`validate`, :func:`read`, :func:`write_parquet`, :func:`frame`,
:func:`concat` and :class:`TraceError` (the schema, :mod:`.schema`); :class:`TraceWriter`,
:func:`append_durably` and :func:`truncate_jsonl` (per-step JSONL, appended and flushed,
:mod:`.jsonl`); :class:`RolloutSink` (:mod:`.stream`); the metrics of ``docs/metrics.md``
(:mod:`.metrics`); strict JSON (:mod:`.strict_json`); field checks (:mod:`.field_checks`).
"""

from rolloutlab.sim import lazy_exports

# module of this package -> the interface names it defines
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "schema": "TraceError validate read write_parquet frame concat empty",
        "jsonl": "TraceWriter append_durably truncate_jsonl",
        "stream": "RolloutSink",
        "progress": "progress_bar phase",
        "metrics": "DEFAULT_TAU straggler_ratio group_straggler_ratio straggler_event slot_idle_fraction step_metrics staleness run_summary pipeline_summary learner_idle_fraction generator_idle_fraction",
        "strict_json": "dumps loads write_json write_atomic",
    },
)
