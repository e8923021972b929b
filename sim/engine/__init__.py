"""The SimPy engine: W worker replicas under continuous batching, each a
:class:`EngineWorker` (the slot :class:`Worker`, or the :class:`PagedWorker` with KV blocks,
preemption, chunked prefill and a prefix cache), behind a dispatcher (:class:`Engine`);
:func:`generate` runs one synchronous generation phase; pause, resume and abort of running
requests (:mod:`.control`); the vectorised fast path (:mod:`.fastpath`).
"""

from rolloutlab.sim import lazy_exports

_INTERFACE = {
    "Engine": "core",
    "generate": "core",
    "EngineConfig": "config",
    "EngineWorker": "worker",
    "Worker": "slot_worker",
    "PagedWorker": "paged_worker",
    "Batch": "batch",
    "pause": "control",
    "resume": "control",
    "abort": "control",
}
"""Exported name -> the module of this package that defines it."""

__all__ = sorted(_INTERFACE)
__getattr__, __dir__ = lazy_exports(__name__, _INTERFACE)
